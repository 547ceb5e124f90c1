"""`python -m search`: the LPES search entry point (the search itself is not built yet)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m search",
        description=(
            "LPES: search one RoPE scaling factor per layer of a frozen model with a Bézier-constrained "
            "genetic algorithm and write a scale file. Not implemented yet: this release ships the "
            "positional core it will run on (see docs/STATUS.md)."
        ),
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run a search (not implemented yet)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    parser.exit(2, "python -m search run: the LPES search is not implemented yet (see docs/STATUS.md).\n")
    return 2
