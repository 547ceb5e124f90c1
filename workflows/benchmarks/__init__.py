"""The benchmarks, `python -m workflows benchmark-*`: each measures one cost side by side in one run.

A benchmark is two modules: `NAME.py` holds its options, the checks that need no model and its report's
text (what `--help`, `--print_config` and a refusal load: no torch), and `NAME_measure.py` the measuring,
imported by `run_checked` only once the options are checked (docs/benchmarks.md lists what each measures).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from jsonargparse import Namespace

from repo_common.config_cli import ConfigParser, deferred, script_options


def run_checked(
    options: Namespace,
    parser: ConfigParser,
    check: Callable[[argparse.Namespace], None] | None,
    measure: str,
) -> int:
    """The options checked as a script's (`script_options`: `--print_config` prints them and exits), then
    `measure` ("MODULE:FUNCTION", imported only now: torch and the models) run with them; its exit code."""
    args = script_options(parser, options, check)
    module, function = measure.split(":")
    return deferred(module, function)(args) or 0
