"""`python -m repo_train`: entry point of the training package.

Subcommands: `demo` (the positional core on a tiny model), `fit` / `validate`
(LightningCLI training; without a config the built-in tiny default), and
`export` (a training checkpoint to an HF directory).
"""

from __future__ import annotations

import argparse
import sys

from repo_train import demo, export
from repo_train.cli_errors import OneLineArgumentParser, report_user_errors


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(  # a bad option of demo / export: one line, not the usage block
        prog="python -m repo_train",
        description="repo-train: OLMo-2 with learned (REPO) and baseline position methods.",
    )
    sub = parser.add_subparsers(dest="command")
    demo_parser = sub.add_parser(
        "demo", help="tiny OLMo-2 with REPO: train a few steps, generate, print parameter counts and positions"
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(run=demo.run)
    sub.add_parser("fit", help="train (LightningCLI; `python -m repo_train fit --help` for its options)")
    sub.add_parser("validate", help="validate a checkpoint (LightningCLI)")
    export_parser = sub.add_parser("export", help="Lightning/DeepSpeed checkpoint -> HF directory")
    export.add_arguments(export_parser)
    export_parser.set_defaults(run=export.run)
    return parser


LIGHTNING_SUBCOMMANDS = ("fit", "validate")
#: User mistakes: one clear line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
        from repo_train.training.cli import run  # imports Lightning only when training

        return report_user_errors(f"python -m repo_train {argv[0]}", lambda: run(argv), USER_ERRORS)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return report_user_errors(f"python -m repo_train {args.command}", lambda: args.run(args), USER_ERRORS)
