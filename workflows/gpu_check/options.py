"""The options of `python -m workflows check-gpu` and the checks of them that need no torch.

The command's work is imported only after them (`deferred`): `workflows.gpu_check.command` (torch, the method
registries: the CUDA check), then, with a GPU there, `workflows.gpu_check.groups` (the check groups).
"""

from __future__ import annotations

from jsonargparse.typing import PositiveFloat, PositiveInt

from repo_common.config_cli import deferred
from repo_train.real_model import DEFAULT_OUT
from workflows.gpu_check.rows import chosen

CHECKS = ("positions", "real_model", "harness", "training", "throughput")
_run_on_device = deferred("workflows.gpu_check.command", "run")


def add_arguments(parser) -> None:
    """The options of `check-gpu` (also keys of a `--config` file)."""
    parser.add_argument("--checks", type=str, default=",".join(CHECKS), help="comma-separated groups to run")
    parser.add_argument("--methods", type=str | None, default=None,
                        help="comma-separated position methods of the positions group (default: every registered "
                             "one: the model's position methods, then the evaluation methods)")  # fmt: skip
    parser.add_argument("--train_processes", type=PositiveInt, default=1,
                        help="GPUs (torchrun processes) of the DeepSpeed runs")  # fmt: skip
    parser.add_argument("--real_model", type=str, default=DEFAULT_OUT,
                        help="real_model group: the HF directory of python -m repo_train real-model (absent: skipped)")  # fmt: skip
    parser.add_argument("--seq_len", type=PositiveInt, default=1024, help="throughput: tokens per step")
    parser.add_argument("--pairs", type=PositiveInt, default=10, help="throughput: timed RoPE/REPO step pairs")
    parser.add_argument("--peak_tflops", type=PositiveFloat | None, default=None,
                        help="peak dense bf16 TFLOP/s of one GPU for MFU (default: from the device name)")  # fmt: skip
    parser.add_argument("--workdir", type=str | None, default=None,
                        help="where runs and logs go (default: a temporary directory, kept if a check fails)")  # fmt: skip


def run(options, _parser=None) -> int:
    """check-gpu: `--checks` refused here, before torch loads; the rest in `workflows.gpu_check.command`."""
    return _run_on_device(options, chosen(options.checks, CHECKS, "--checks"))
