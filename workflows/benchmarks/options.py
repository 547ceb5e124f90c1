"""The options every benchmark shares: one dataclass each benchmark's own options extend (no torch).

`BenchmarkOptions` holds what every timed benchmark declares (`--rounds`, `--threads`), `RandomModelOptions`
adds the shape of the random model the model benchmarks build (`--hidden`, `--layers`, `--heads`). A benchmark
redeclares a field only to change its default or its help. `measured` is the function every benchmark's command
ends in: the options built (their `__post_init__` judges them: a ValueError is the one-line refusal), then the
measuring module, imported only now (torch and the models).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config, deferred


@dataclass
class BenchmarkOptions:
    """What every timed benchmark takes (each also a key of a `--config` file)."""

    rounds: PositiveInt = 5
    """timed rounds, the compared runs alternating within each (after the warm-up)"""
    threads: PositiveInt | None = None
    """torch threads (default: torch's own count)"""

    def options(self) -> dict[str, Any]:
        """The options as given, by field (what a child process or a report takes), without derived values."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


@dataclass
class RandomModelOptions(BenchmarkOptions):
    """A benchmark of a random model: its shape too."""

    hidden: PositiveInt = 256
    """model width (FFN 4x)"""
    layers: PositiveInt = 4
    """decoder layers"""
    heads: PositiveInt = 4
    """attention heads"""


def declare(parser: ConfigParser, config_class: type, description: str) -> None:
    """A benchmark's parser: its help text and the fields of `config_class` as its options."""
    parser.description = description
    add_dataclass_options(parser, config_class)


def measured(parsed: Namespace, config_class: type, measure: str) -> int:
    """The options built as `config_class` (judged there), then `measure` ("MODULE:FUNCTION", imported only now)
    run with them; its exit code."""
    options = dataclass_config(parsed, config_class)
    module, function = measure.split(":")
    return deferred(module, function)(options) or 0
