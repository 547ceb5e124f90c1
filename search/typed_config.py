"""The one loader of the search's settings: jsonargparse reads the typed dataclasses, their fields and types.

Every way a search is configured goes through `add_typed` and `parse_typed`: `python -m search run` and
`diagnose` (command line and `--config`), `search.config.load_config` and `SearchConfig.from_dict` (the
Python API), and the GA settings a state file saved, which `--resume` continues (`search.ga.SearchState`).
So a key, a type or a range is checked in one place and refused with the same one-line message everywhere.
Below `search.config` (which holds the dataclasses) so that `search.ga` can load its saved settings too.
"""

from __future__ import annotations

from argparse import ArgumentError
from collections.abc import Mapping
from typing import Any

from jsonargparse import Namespace

from repo_common.config_cli import ConfigParser, one_line_error


class ConfigError(ValueError):
    """A search config that cannot be used; the message names the file, the key and the fix."""


def add_typed(parser: ConfigParser, cls: type, nested_key: str | None = None) -> None:
    """`cls`'s fields as options of `parser` (`--ga.population`, or `--population` at the top), typed by it."""
    parser.add_class_arguments(cls, nested_key, fail_untyped=True, sub_configs=True)


def parse_typed(parser: ConfigParser, data: Any, source: str) -> Namespace:
    """`data` (nested dicts, as YAML or JSON hold them) checked by `parser`; a mistake is a `ConfigError` of one
    line naming `source`."""
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return parser.parse_object(dict(data or {}))
    except (ArgumentError, TypeError, ValueError) as err:
        raise ConfigError(f"{source}: {parser.explain(str(err))}") from None


def instantiate(parser: ConfigParser, options: Namespace, source: str | None = None) -> dict[str, Any]:
    """The parsed options as objects (each dataclass's own checks run here); a failed check is a `ConfigError`
    (its message prefixed with `source` when given)."""
    try:
        return dict(parser.instantiate(options))
    except (TypeError, ValueError) as err:
        text = one_line_error(str(err))
        raise ConfigError(f"{source}: {text}" if source else text) from None


def load_section(cls: type, key: str, data: Any, source: str) -> Any:
    """One section (`cls` under `key`, e.g. GAConfig under "ga") from its saved dict, by the same rules."""
    parser = ConfigParser(prog=source)
    add_typed(parser, cls, key)
    return instantiate(parser, parse_typed(parser, {key: data}, source), source)[key]
