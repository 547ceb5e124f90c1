"""`python -m repo_train`: entry point of the training package.

Subcommands grow with the project; today: `demo` (the built-in default of
the main job). Training (`fit`) and checkpoint export arrive with issue 3.
"""

from __future__ import annotations

import argparse
import sys

from repo_train import demo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m repo_train",
        description="repo-train: OLMo-2 with learned (REPO) and baseline position methods.",
    )
    sub = parser.add_subparsers(dest="command")
    demo_parser = sub.add_parser(
        "demo", help="tiny OLMo-2 with REPO: train a few steps, generate, print parameter counts and positions"
    )
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(run=demo.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as err:  # user mistakes: one clear line, no traceback
        print(f"python -m repo_train {args.command}: error: {err}", file=sys.stderr)
        return 2
