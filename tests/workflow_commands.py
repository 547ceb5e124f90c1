"""A `python -m workflows` command's options as it checks them, for tests of options and of the work behind them."""

from __future__ import annotations

import importlib

from repo_common.config_cli import ConfigParser, parse_script, typed_options
from workflows.cli import COMMANDS


def command_module(command: str):
    """The module of `command`'s options and checks (its `run`)."""
    return importlib.import_module(COMMANDS[command][2].__name__.rpartition(".")[0])


def parse_args(command: str, argv: list[str]):
    """The checked options `python -m workflows COMMAND ARGV` runs with: `--print_config` prints them and exits 0,
    a mistake is one line and exit code 2 (SystemExit, as the command exits). A typed command's options are its
    dataclass (the module's `OPTIONS`), built as its action builds it."""
    help_text, add_arguments, _ = COMMANDS[command]
    parser = ConfigParser.for_command(f"python -m workflows {command}", help_text)
    add_arguments(parser)
    if parser.config_class is not None:  # a typed command: its dataclass judges the options
        return typed_options(parser, argv)
    return parse_script(parser, argv, getattr(command_module(command), "check_options", None))
