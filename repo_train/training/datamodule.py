"""`RePoDataModule`: fixed-length token sequences, a global batch, exact resume.

The global batch (sequences per optimizer step) is the unit the paper fixes
(512 × 4096 tokens); gradient accumulation is *computed* from it, the micro
batch and the number of processes, and set on the Trainer in `setup`. The
sampler counts samples consumed by all ranks, and that count is stored in the
checkpoint, so a resumed run reads exactly the sequences an uninterrupted one
would have read next. The training loader (`RunLoader`) carries that position
itself too, as Lightning expects of a resumable loader: without
`state_dict`/`load_state_dict` on it, Lightning warns on every mid-run resume
that the loader "is not resumable".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytorch_lightning as pl
from torch.utils.data import DataLoader, Sampler

from repo_train.data import DataSource, ResumableSampler, SyntheticData, TokenSequenceDataset
from repo_train.training.settings_checks import batch_accumulation


def silence_loader_warnings() -> None:
    """Hide two harmless warnings Lightning raises about these loaders (called in `setup`, just before them).

    Installed per run rather than at import, so they also hold inside a caller's `catch_warnings`
    (pytest's, for one); a filter added twice is kept once.
    """
    # Without validation data `val_dataloader` returns [], Lightning's documented way to skip validation,
    # and Lightning then warns that the list has length zero: intended here, so not worth a line.
    warnings.filterwarnings("ignore", message=r"Total length of `list` across ranks is zero", category=UserWarning)
    # Lightning 2.6 wraps the loaders with torch's `LeafSpec`, deprecated in torch 2.13: a note for Lightning's
    # developers (nothing a user can change), raised from Lightning's own module.
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"pytorch_lightning\.utilities\._pytree",
    )


class RunSampler(Sampler[int]):
    """The rest of a run as one stream: the indices up to global sample `end`, crossing data epochs.

    Lightning then sees a single long epoch that ends at `max_steps`, so its
    epoch bookkeeping cannot disagree with the data order on resume.
    """

    def __init__(self, sampler: ResumableSampler, end: int):
        """
        Args:
            sampler: this rank's sampler, at the position the run starts from.
            end: samples consumed by all ranks when the run ends (max_steps × global batch).
        """
        self.sampler = sampler
        self.end = end
        self.length = self._left()

    def _left(self) -> int:
        return max(0, self.end - self.sampler.consumed) // self.sampler.world_size

    def restart(self, state: dict[str, Any]) -> None:
        """Continue from a saved `ResumableSampler` state (refused if saved for other data); before iterating."""
        self.sampler.load_state_dict(state)
        self.length = self._left()

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        produced = 0
        while produced < self.length:
            for index in self.sampler:  # each pass runs to the end of one data epoch
                yield index
                produced += 1
                if produced == self.length:
                    return


class RunLoader(DataLoader):
    """The training loader, resumable in Lightning's sense: its state is the run's data position.

    Lightning stores `state_dict()` in each checkpoint and hands it to
    `load_state_dict` before a resumed run's first batch. The position is
    `position()`, the samples consumed by completed optimizer steps (from the
    trainer), not the sampler's own count, which runs ahead by the batches
    Lightning and the workers have prefetched.
    """

    def __init__(self, dataset, run_sampler: RunSampler, position: Callable[[], int], **kwargs):
        super().__init__(dataset, sampler=run_sampler, **kwargs)
        self.run_sampler = run_sampler
        self.position = position

    def state_dict(self) -> dict[str, Any]:
        return {**self.run_sampler.sampler.state_dict(), "consumed": int(self.position())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_sampler.restart(state)


class RePoDataModule(pl.LightningDataModule):
    def __init__(
        self,
        train: DataSource | None = None,
        val: DataSource | None = None,
        global_batch_size: int = 16,
        micro_batch_size: int = 8,
        num_workers: int = 0,
    ):
        """
        Args:
            train: training data, e.g. `SyntheticData(seq_len=128)` or `OlmoNumpyData(mix_file=..., seq_len=4096)`
                (in a config: class_path + init_args); None is `SyntheticData()`. See repo_train.data.
            val: optional validation data (same form).
            global_batch_size: sequences per optimizer step, over all processes.
            micro_batch_size: sequences per forward pass on one process.
            num_workers: DataLoader worker processes.
        """
        super().__init__()
        self.train_source = DataSource.from_config(train, "data.train") if train is not None else SyntheticData()
        self.val_source = DataSource.from_config(val, "data.val") if val is not None else None
        # Saved as plain {class_path, init_args} mappings, the form LightningCLI's config.yaml has: checkpoints
        # then load with weights_only=True and the logged hparams are YAML. (`save_hyperparameters` reads these
        # locals; under LightningCLI it stores the parsed config, which has that form already.)
        train = self.train_source.to_config() if train is not None else None
        val = self.val_source.to_config() if val is not None else None
        self.save_hyperparameters()
        self.train_dataset: TokenSequenceDataset | None = None
        self.val_dataset: TokenSequenceDataset | None = None
        self.sampler: ResumableSampler | None = None
        self._consumed = 0

    def build_sources(self) -> None:
        """Read (and check) the data sources; the training command calls it before anything is written."""
        if self.train_dataset is None:
            self.train_dataset = self.train_source.build()
        if self.val_source is not None and self.val_dataset is None:
            self.val_dataset = self.val_source.build()

    def check_model(self, config) -> None:
        """The data fits a model of this config: ids below its vocabulary, sequences within its context."""
        self.train_dataset.check_model_vocab_size(config.vocab_size)
        if self.val_dataset is not None:
            self.val_dataset.check_model_vocab_size(config.vocab_size)
        if self.train_dataset.seq_len > config.max_position_embeddings:
            raise ValueError(
                f"data seq_len={self.train_dataset.seq_len} exceeds the model's max_position_embeddings="
                f"{config.max_position_embeddings}; shorten seq_len or extend the context (e.g. YaRN)."
            )

    def setup(self, stage: str) -> None:
        silence_loader_warnings()
        self.build_sources()
        if self.trainer is None:
            return
        self.check_model(self.trainer.lightning_module.model_config())
        self.trainer.accumulate_grad_batches = batch_accumulation(
            self.hparams.global_batch_size, self.hparams.micro_batch_size, self.trainer.world_size
        )

    # ------------------------------------------------------------ loaders
    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        self.sampler = self.train_dataset.sampler(rank=rank, world_size=world, start_index=self._consumed)
        if trainer is not None and trainer.max_steps and trainer.max_steps > 0:
            end = trainer.max_steps * self.hparams.global_batch_size
        else:  # to the end of the current data epoch
            end = self._consumed + len(self.sampler) * world
        return RunLoader(
            self.train_dataset,
            RunSampler(self.sampler, end),
            self.consumed_samples,
            batch_size=self.hparams.micro_batch_size,
            num_workers=self.hparams.num_workers,
            drop_last=True,
        )

    def val_dataloader(self):
        if self.val_dataset is None:
            return []
        return DataLoader(self.val_dataset, batch_size=self.hparams.micro_batch_size, shuffle=False)

    # ------------------------------------------------------------- resume
    def consumed_samples(self) -> int:
        """Samples consumed by all ranks, counted from optimizer steps (exact with drop_last)."""
        if self.trainer is None:
            return self._consumed
        return self.trainer.global_step * self.hparams.global_batch_size

    def state_dict(self) -> dict[str, Any]:
        return {"consumed_samples": self.consumed_samples(), "train": self.train_source.to_config()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = DataSource.from_saved(state.get("train"))  # checkpoints before typed sources hold a `source:` dict
        if saved is not None and saved != self.train_source:
            raise ValueError(
                "the checkpoint was trained on a different data config; resume with the same `data.train` "
                f"(checkpoint: {saved.to_config()}, now: {self.train_source.to_config()})."
            )
        self._consumed = int(state["consumed_samples"])
