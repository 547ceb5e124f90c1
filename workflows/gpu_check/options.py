"""The options of `python -m workflows check-gpu` and the checks of them that need no torch.

The command's work is imported only after them (`deferred`): `workflows.gpu_check.command` (torch, the method
registries: the CUDA check and `--methods`), then, with a GPU there, `workflows.gpu_check.groups` (the check
groups).
"""

from __future__ import annotations

from dataclasses import dataclass

from jsonargparse import Namespace
from jsonargparse.typing import PositiveFloat, PositiveInt

from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config, deferred
from repo_train.real_model import DEFAULT_OUT
from workflows.gpu_check.rows import chosen

CHECKS = ("positions", "real_model", "harness", "training", "throughput")
_run_on_device = deferred("workflows.gpu_check.command", "run")


@dataclass
class CheckGpu:
    """The options of `check-gpu` (each also a key of a `--config` file), judged when built: `--checks` here,
    before torch loads; `--methods` by `workflows.gpu_check.command`, which reads the method registries."""

    checks: str = ",".join(CHECKS)
    """comma-separated groups to run"""
    methods: str | None = None
    """comma-separated position methods of the positions group (default: every registered one: the model's
    position methods, then the evaluation methods)"""
    train_processes: PositiveInt = 1
    """GPUs (torchrun processes) of the DeepSpeed runs"""
    real_model: str = DEFAULT_OUT
    """real_model group: the HF directory of python -m repo_train real-model (absent: skipped)"""
    seq_len: PositiveInt = 1024
    """throughput: tokens per step"""
    pairs: PositiveInt = 10
    """throughput: timed RoPE/REPO step pairs"""
    peak_tflops: PositiveFloat | None = None
    """peak dense bf16 TFLOP/s of one GPU for MFU (default: from the device name)"""
    workdir: str | None = None
    """where runs and logs go (default: a temporary directory, kept if a check fails)"""

    def __post_init__(self) -> None:
        self.check_list = chosen(self.checks, CHECKS, "--checks")


OPTIONS = CheckGpu


def add_arguments(parser: ConfigParser) -> None:
    add_dataclass_options(parser, CheckGpu)


def run(parsed: Namespace, _parser: ConfigParser | None = None) -> int:
    """check-gpu: the options built (`--checks` refused there, before torch loads), then
    `workflows.gpu_check.command`."""
    options = dataclass_config(parsed, CheckGpu)
    return _run_on_device(options, options.check_list)
