"""A `python -m workflows` command's options as it checks them, for tests of options and of the work behind them."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from repo_common.config_cli import ConfigParser, dataclass_config, dump_config, parse_script, printable_options
from workflows.cli import COMMANDS, TYPED_COMMANDS


def command_module(command: str):
    """The module of `command`'s options and checks (its `run`)."""
    return importlib.import_module(COMMANDS[command][2].__name__.rpartition(".")[0])


def parse_args(command: str, argv: list[str]) -> argparse.Namespace | Any:
    """The checked options `python -m workflows COMMAND ARGV` runs with: `--print_config` prints them and exits 0,
    a mistake is one line and exit code 2 (SystemExit, as the command exits). A typed command's options are its
    dataclass (the module's `OPTIONS`), built as its action builds it."""
    help_text, add_arguments, _ = COMMANDS[command]
    parser = ConfigParser.for_command(f"python -m workflows {command}", help_text)
    add_arguments(parser)
    if command not in TYPED_COMMANDS:
        return parse_script(parser, argv, getattr(command_module(command), "check_options", None))
    parsed, show = parser.parse(argv)
    if show:
        print(dump_config(printable_options(parsed)), end="")
        raise SystemExit(0)
    try:
        return dataclass_config(parsed, command_module(command).OPTIONS)
    except ValueError as err:
        parser.fail(str(err))
