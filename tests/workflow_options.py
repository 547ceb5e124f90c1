"""A `python -m workflows` command's options as its action sees them, checked, without running it."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from repo_common.config_cli import ConfigParser, checked_script_options
from workflows.cli import COMMANDS


def parse_options(name: str, argv: list[str], check: Callable[[argparse.Namespace], None]) -> argparse.Namespace:
    """The options `python -m workflows NAME ARGV` runs with (`check` applied); a mistake or `--print_config` exits
    as the command does (one line and code 2; the printed options and code 0)."""
    help_text, add_arguments, _ = COMMANDS[name]
    parser = ConfigParser.for_command(f"python -m workflows {name}", help_text)
    add_arguments(parser)
    parsed, show = parser.parse(argv)
    options = checked_script_options(parser, parsed, show, check)
    if options is None:
        raise SystemExit(0)
    return options
