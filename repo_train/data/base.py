"""The contract every training data source shares, and the checks and helpers the sources use.

`TokenSequenceDataset` is a map-style dataset where sample i is always the same
`{"input_ids": LongTensor[seq_len]}`; `epoch_order` gives an epoch's order from
(seed, epoch) alone; `ResumableSampler` turns "samples consumed so far" into the
next indices of each rank. The sources (`olmo_numpy`, `text`, `synthetic`,
`prompt_completion`) import from here, never from the package, so the package's
`__init__` can re-export them without an import cycle.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler


def check_seq_len(seq_len: int) -> None:
    """Next-token prediction needs an input and a target: at least 2 tokens."""
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 2:
        raise ValueError(f"seq_len must be an integer >= 2 (one input and one target token), got {seq_len!r}.")


def check_seed(seed: int) -> None:
    """numpy seeds are non-negative integers."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}; pick e.g. seed=0.")


def epoch_order(num_samples: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """Sample indices of one epoch: a permutation seeded by (seed, epoch), or 0..n-1 unshuffled."""
    check_seed(seed)
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}.")
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(num_samples).astype(np.int64)


def expand_paths(patterns: Sequence[str | Path], *, base_dir: Path | None = None, what: str = "data") -> list[Path]:
    """Explicit paths and globs -> existing files, in a stable order; each mistake gets its own message.

    A glob expands to its matches sorted by name; explicit paths keep the given
    order (and repeats, which OLMo mixes use to upsample a file).
    """
    if isinstance(patterns, (str, Path)):
        patterns = [patterns]
    if not patterns:
        raise ValueError(f"no {what} paths given: pass at least one file path or glob (e.g. 'shards/*.npy').")
    files: list[Path] = []
    for pattern in patterns:
        text = str(pattern).strip()
        if not text:
            raise ValueError(f"an empty string was given as a {what} path: remove it or give a file path or glob.")
        if "://" in text:
            raise ValueError(
                f"{text!r} is a URL; only local files are read here. Download it first and pass the local path."
            )
        path = Path(text).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if any(char in str(path) for char in "*?["):
            matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True) if Path(m).is_file())
            if not matches:
                raise FileNotFoundError(
                    f"the glob {str(path)!r} matched no {what} files: check the directory and pattern."
                )
            files.extend(matches)
        elif path.is_dir():
            raise ValueError(f"{str(path)!r} is a directory: pass the files inside it, e.g. with a glob '{path}/*'.")
        elif not path.is_file():
            raise FileNotFoundError(
                f"{what} file {str(path)!r} does not exist: check the path (relative paths are "
                f"resolved against {str(base_dir or Path.cwd())!r})."
            )
        else:
            files.append(path)
    return files


class TokenSequenceDataset(Dataset):
    """Map-style dataset of fixed-length token sequences; subclasses implement `__len__` and `_sequence`."""

    seq_len: int
    seed: int
    vocab_size: int
    eos_token_id: int
    pad_token_id: int

    def __len__(self) -> int:
        raise NotImplementedError

    def _sequence(self, index: int) -> torch.Tensor:
        """The LongTensor[seq_len] of sample `index` (already range-checked)."""
        raise NotImplementedError

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        n = len(self)
        index = int(index)
        if not -n <= index < n:
            raise IndexError(f"sample index {index} is out of range for a dataset of {n} sequences.")
        return {"input_ids": self._sequence(index % n)}

    def order(self, epoch: int, shuffle: bool = True) -> np.ndarray:
        """This dataset's sample order for `epoch` (the one `ResumableSampler` walks through)."""
        return epoch_order(len(self), self.seed, epoch, shuffle)

    def sampler(
        self, rank: int = 0, world_size: int = 1, start_index: int = 0, shuffle: bool = True
    ) -> ResumableSampler:
        """A `ResumableSampler` over this dataset with its seed."""
        return ResumableSampler(len(self), self.seed, rank, world_size, start_index, shuffle)

    def check_model_vocab_size(self, model_vocab_size: int) -> None:
        """Fail before training if the model's embedding cannot hold every token id of this data."""
        if model_vocab_size < self.vocab_size:
            raise ValueError(
                f"the model has vocab_size={model_vocab_size} but the data uses token ids up to {self.vocab_size - 1}: "
                f"set the model's vocab_size to at least {self.vocab_size} (OLMo pads it to a multiple of 128)."
            )


class ResumableSampler(Sampler[int]):
    """Indices for one rank, resumable from a count of samples consumed by all ranks together.

    The global stream is epoch 0's order, then epoch 1's, ...; each epoch drops its
    last `dataset_len % world_size` samples so every rank gets the same count, and
    rank r takes global positions r, r + world_size, ... . `consumed` counts global
    samples (world_size per index yielded here), so a run resumed from `state_dict()`
    continues exactly where the interrupted one stopped, even on another world size.

    One `iter()` runs to the end of the current epoch; the next `iter()` starts the
    next epoch. The count advances when an index is handed out: with DataLoader
    workers prefetching, restore instead from the trainer's count
    (`steps × global batch size`) via `start_index` or `load_state_dict`.
    In Lightning, pass `use_distributed_sampler=False` so it keeps this sampler.
    """

    def __init__(
        self,
        dataset_len: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        start_index: int = 0,
        shuffle: bool = True,
    ) -> None:
        check_seed(seed)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}.")
        if dataset_len < world_size:
            raise ValueError(
                f"the dataset has {dataset_len} sequences, fewer than world_size={world_size}, so some ranks would get "
                "none: add data, lower seq_len, or use fewer ranks."
            )
        self.dataset_len = dataset_len
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.samples_per_epoch = dataset_len // world_size * world_size
        self.consumed = 0
        self._set_consumed(start_index)

    def _set_consumed(self, consumed: int) -> None:
        if consumed < 0 or consumed % self.world_size:
            raise ValueError(
                f"samples consumed ({consumed}) must be a non-negative multiple of world_size={self.world_size}: "
                "resume from a step boundary (steps × global batch size)."
            )
        self.consumed = int(consumed)

    @property
    def epoch(self) -> int:
        """The epoch the next index comes from."""
        return self.consumed // self.samples_per_epoch

    def __len__(self) -> int:
        """Indices left for this rank in the current epoch."""
        return (self.samples_per_epoch - self.consumed % self.samples_per_epoch) // self.world_size

    def __iter__(self) -> Iterator[int]:
        order = epoch_order(self.dataset_len, self.seed, self.epoch, self.shuffle)
        start = self.consumed % self.samples_per_epoch
        for position in range(start + self.rank, self.samples_per_epoch, self.world_size):
            self.consumed += self.world_size
            yield int(order[position])

    def state_dict(self) -> dict[str, Any]:
        return {
            "consumed": self.consumed,
            "dataset_len": self.dataset_len,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `consumed`; refuse a state saved for other data, since the order would differ."""
        if "consumed" not in state:
            raise ValueError("sampler state has no 'consumed' entry: pass the dict returned by state_dict().")
        for key in ("dataset_len", "seed", "shuffle"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"the sampler state was saved with {key}={state[key]!r} but this sampler has {key}="
                    f"{getattr(self, key)!r}: rebuild the data with the run's original config to resume, "
                    "or start a new run with start_index=0."
                )
        self._set_consumed(int(state["consumed"]))
