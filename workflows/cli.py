"""`python -m workflows`: the commands that sit on top of every package.

Today one subcommand, `check-gpu` (every GPU path, one table; `workflows.gpu_check`), configured the
project's one way (`repo_common.config_cli`: `--config`, `--print_config`, one-line errors).
"""

from __future__ import annotations

import sys

from repo_common.config_cli import dispatch
from workflows.gpu_check import command as check_gpu

COMMANDS = {
    "check-gpu": (
        "prove the GPU paths (bf16, flash-attn 2, NCCL + DeepSpeed, harness, MFU): one table",
        check_gpu.add_arguments,
        check_gpu.run,
    ),
}
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(
        "python -m workflows", "repo-train workflows: checks that span every package.", COMMANDS, argv, USER_ERRORS
    )
