"""`python -m repo_train fit|validate`: LightningCLI over the module and data module.

Without a config file it trains the built-in tiny default (tiny OLMo-2 with
REPO on the synthetic corpus, CPU, about a minute). With
`--config configs/train/<run>.yaml` it runs a paper configuration; under
`torchrun` each process runs this same command (Lightning reads the torchrun
environment).
"""

from __future__ import annotations

import logging
import sys

from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningCLI

from repo_train.training import strategies  # noqa: F401  (registers the "deepspeed_cpu" strategy)
from repo_train.training.callbacks import ThroughputMonitor
from repo_train.training.checks import check_config_overrides, check_init_from, check_resume
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule

log = logging.getLogger(__name__)

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

    def after_fit(self) -> None:
        if self.model.stopped_on_nonfinite:
            checkpoints = [c for c in self.trainer.callbacks if isinstance(c, ModelCheckpoint)]
            last = checkpoints[0].last_model_path if checkpoints else None
            print(
                f"training stopped: non-finite loss at step {self.trainer.global_step}; "
                f"last good checkpoint: {last or 'none saved yet'}",
                file=sys.stderr,
            )
            raise SystemExit(1)


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
