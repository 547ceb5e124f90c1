"""`python -m repo_train fit|validate`: LightningCLI over the module and data module.

Without a config file it trains the built-in tiny default (tiny OLMo-2 with
REPO on the synthetic corpus, CPU, about a minute). With
`--config configs/train/<run>.yaml` it runs a paper configuration; under
`torchrun` each process runs this same command (Lightning reads the torchrun
environment).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningCLI

from repo_train.run_lock import locked_directory
from repo_train.training import strategies  # noqa: F401  (registers the "deepspeed_cpu" strategy)
from repo_train.training.callbacks import ThroughputMonitor
from repo_train.training.checks import check_config_overrides, check_init_from, check_resume
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import NonFiniteLossError, RePoLightningModule

TINY_TRAINER_DEFAULTS = {
    "max_steps": 300,
    "accelerator": "auto",
    "devices": 1,
    "precision": "32-true",
    "gradient_clip_val": 1.0,
    "gradient_clip_algorithm": "norm",
    "log_every_n_steps": 10,
    "use_distributed_sampler": False,  # RePoDataModule shards and resumes the data itself
    "default_root_dir": "outputs/tiny-repo",
}


class RePoCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # Always-on callbacks, configurable as `checkpoint:` and `throughput:` sections of the YAML.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {"checkpoint.every_n_train_steps": 100, "checkpoint.save_last": True, "checkpoint.save_top_k": -1}
        )
        parser.add_lightning_class_args(ThroughputMonitor, "throughput")

    def before_fit(self) -> None:
        model, trainer = self.model, self.trainer
        check_config_overrides(model.hparams.config_overrides)
        check_init_from(model.hparams.init_from)
        ckpt_path = self.config_init[self.subcommand].get("ckpt_path")
        check_resume(ckpt_path, trainer.world_size)
        if trainer._accelerator_connector.use_distributed_sampler:
            raise ValueError(
                "set trainer.use_distributed_sampler: false; RePoDataModule shards and resumes the data itself."
            )
        # Accumulation is computed from the global batch; fail now, not inside a worker.
        RePoDataModule.accumulation(
            self.datamodule.hparams.global_batch_size, self.datamodule.hparams.micro_batch_size, trainer.world_size
        )

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            with self._root_dir_lock(subcommand):
                super()._run_subcommand(subcommand)
        except NonFiniteLossError as err:
            callback = self.trainer.checkpoint_callback
            last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")
            print(f"{err}\nlast good checkpoint: {last or 'none saved yet'}", file=sys.stderr)
            raise SystemExit(1) from None

    def _root_dir_lock(self, subcommand: str):
        """`fit` owns `trainer.default_root_dir` (ROOT/run.lock, held by global rank 0) until it ends.

        Lightning does not guard it: a second run there would interleave
        checkpoints, logs and config.yaml with the first (`last_checkpoint`
        would then pick either run's). Remote roots (s3://...) are not locked.
        """
        root = str(self.trainer.default_root_dir)
        if subcommand != "fit" or self.trainer.global_rank != 0 or "://" in root:
            return nullcontext()
        return locked_directory(root, f"training root dir {root}")


def run(argv: list[str]) -> int:
    RePoCLI(
        RePoLightningModule,
        RePoDataModule,
        trainer_defaults=TINY_TRAINER_DEFAULTS,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
        args=argv,
        parser_kwargs={"prog": "python -m repo_train"},
    )
    return 0


class _ParseOnlyCLI(RePoCLI):
    """Parses and validates a config like `fit` would, without building the trainer or the model."""

    def instantiate_classes(self) -> None:
        pass


def check_config_file(path: str) -> dict:
    """Parse a training YAML against the CLI and check what can be checked without GPUs or data.

    Unknown keys and wrong types fail in the parser (as `fit` would); then the
    model config is built (on the meta device) and the batch arithmetic done
    for the configured devices × nodes. Returns a summary for printing.
    """
    from repo_train.modeling.accounting import config_parameter_report
    from repo_train.modeling.presets import preset

    cli = _ParseOnlyCLI(
        RePoLightningModule, RePoDataModule, trainer_defaults=TINY_TRAINER_DEFAULTS, run=False, args=["--config", path]
    )
    config = cli.config
    model, data, trainer = config.model, config.data, config.trainer
    check_config_overrides(model.config_overrides)
    fields = dict(model.config_overrides or {}, position_method=model.position_method)
    if model.repo_start_layer is not None:
        fields["repo_start_layer"] = model.repo_start_layer
    if model.repo_hidden_size is not None:
        fields["repo_hidden_size"] = model.repo_hidden_size
    model_config = preset(model.preset_name, **fields)
    devices = trainer.devices if isinstance(trainer.devices, int) else 1
    world = devices * (trainer.num_nodes or 1)
    accumulation = RePoDataModule.accumulation(data.global_batch_size, data.micro_batch_size, world)
    seq_len = (data.train or {}).get("seq_len", 128)
    if seq_len > model_config.max_position_embeddings:
        raise ValueError(f"{path}: seq_len {seq_len} > max_position_embeddings {model_config.max_position_embeddings}")
    return {
        "model": model_config,
        "parameters": config_parameter_report(model_config),
        "world_size": world,
        "accumulation": accumulation,
        "tokens_per_step": data.global_batch_size * seq_len,
        "max_steps": trainer.max_steps,
        "lr": model.lr,
        "seed": config.seed_everything,
        "every_n_train_steps": config.checkpoint.every_n_train_steps,
    }
