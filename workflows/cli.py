"""`python -m workflows`: the commands that sit on top of every package.

Today one subcommand, `check-gpu` (every GPU path, one table; `workflows.gpu_check`), configured the
project's one way (`repo_common.config_cli`: `--config`, `--print_config`, one-line errors).
"""

from __future__ import annotations

import sys

from repo_common.config_cli import deferred, dispatch
from workflows.gpu_check import command as check_gpu

COMMANDS = {
    "check-gpu": (
        "prove the GPU paths (bf16, flash-attn 2, NCCL + DeepSpeed, harness, MFU): one table",
        check_gpu.add_arguments,
        check_gpu.run,
    ),
    "study-real-model": (
        "lost in the middle on SmolLM2: every method on real NQ MDQA, the attention bias, an LPES search",
        deferred("workflows.real_model_study.command", "add_arguments"),
        deferred("workflows.real_model_study.command", "run"),
    ),
    "crosscheck-lm-eval": (
        "the project's harness against lm-evaluation-harness on the same MDQA prompts: outputs and speed",
        deferred("workflows.lm_eval_crosscheck.command", "add_arguments"),
        deferred("workflows.lm_eval_crosscheck.command", "run"),
    ),
    "reproduce-reversal": (
        "REPO paper, appendix C: text reversal with NoPE, RoPE and REPO on tiny models trained on the CPU",
        deferred("workflows.reversal.command", "add_arguments"),
        deferred("workflows.reversal.command", "run"),
    ),
}
#: Commands whose `--print_config` runs their action: it prints the options as checked and resolved.
RESOLVES_CONFIG = ("study-real-model", "crosscheck-lm-eval", "reproduce-reversal")
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(
        "python -m workflows",
        "repo-train workflows: checks that span every package.",
        COMMANDS,
        argv,
        USER_ERRORS,
        resolves_config=RESOLVES_CONFIG,
    )
