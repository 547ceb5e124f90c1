"""`python -m evaluation`: the evaluation harness entry point (the harness is not built yet)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m evaluation",
        description=(
            "Evaluate a model (optionally with calibration methods) on long-context tasks with the "
            "answer at every position. Not implemented yet: this release ships the positional core "
            "(see docs/STATUS.md)."
        ),
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run an evaluation (not implemented yet)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    parser.exit(2, "python -m evaluation run: the harness is not implemented yet (see docs/STATUS.md).\n")
    return 2
