"""argparse value types shared by the project's command lines (repo_train, evaluation, search)."""

from __future__ import annotations

import argparse


def _int_at_least(minimum: int, wording: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wording}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {wording}, got {text!r}")
        return value

    return parse


#: An integer >= 1 (counts, sizes).
positive_int = _int_at_least(1, "a positive integer")
#: An integer >= 0 (e.g. generations after the first).
non_negative_int = _int_at_least(0, "an integer >= 0")
