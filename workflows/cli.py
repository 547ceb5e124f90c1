"""`python -m workflows` (also `repo-workflows`): the commands that sit on top of every package.

`quickstart` (the whole loop: train, search, calibrate, evaluate, report; `workflows.quickstart`),
`reproduce-position-bias` (LPES and the calibrators on a tiny model that lost the middle) and `check-gpu`
(every GPU path, one table; `workflows.gpu_check`), configured the project's one way
(`repo_common.config_cli`: `--config`, `--print_config`, one-line errors).
"""

from __future__ import annotations

import sys

from repo_common.config_cli import deferred, dispatch
from workflows.gpu_check import command as check_gpu

#: The run commands' modules are imported only when that command runs (`deferred`): `--help` stays fast.
COMMANDS = {
    "quickstart": (
        "the whole loop on the built-in tiny default, or at full scale from a loop file (--config): one report",
        deferred("workflows.quickstart.options", "add_arguments"),
        deferred("workflows.quickstart.command", "run"),
    ),
    "reproduce-position-bias": (
        "LPES and the calibrators on a tiny RoPE model trained to lose the middle, over seeds (CPU)",
        deferred("workflows.reproduce_position_bias", "add_arguments"),
        deferred("workflows.reproduce_position_bias", "run"),
    ),
    "check-gpu": (
        "prove the GPU paths (bf16, flash-attn 2, NCCL + DeepSpeed, harness, MFU): one table",
        check_gpu.add_arguments,
        check_gpu.run,
    ),
}
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)
#: Commands whose `--print_config` prints what they resolve the options to (the quickstart: a loop file's sections).
RESOLVES_CONFIG = ("quickstart",)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(
        "python -m workflows",
        "repo-train workflows: the whole loop, reproductions, and checks that span every package.",
        COMMANDS,
        argv,
        USER_ERRORS,
        resolves_config=RESOLVES_CONFIG,
    )
