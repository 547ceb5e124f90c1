"""A registry of classes by name whose built-in entries are class paths, imported on first use.

`evaluation run` lists, checks and resolves method names before it loads a model; the built-in methods'
modules import torch, which costs seconds of start-up. So the registry knows each built-in by its class
path (`"evaluation.methods.pi.PositionInterpolation"`) and imports that module only when the entry is
read; `--help`, `--print_config` and a refusal of an unknown name read only the names. A class registered
as it is defined (`@register_method`, a user's module named with `--import`) is held as the class itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

T = TypeVar("T")


def class_path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class LazyClassRegistry(MutableMapping[str, type[T]], Generic[T]):
    """`name -> class`, as a dict; an entry given as a class path is imported when it is first read."""

    def __init__(self, kind: str, builtins: dict[str, str]):
        self.kind = kind
        self._entries: dict[str, type[T] | str] = dict(builtins)

    def __getitem__(self, name: str) -> type[T]:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.rpartition(".")
            loaded = getattr(importlib.import_module(module), attribute)  # the module registers the class as it loads
            self._entries[name] = entry = loaded
        return entry

    def __setitem__(self, name: str, cls: type[T]) -> None:
        self._entries[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def class_path(self, name: str) -> str:
        """The class path of `name`'s class, without importing it (what `--help` lists)."""
        entry = self._entries[name]
        return entry if isinstance(entry, str) else class_path_of(entry)

    def holds(self, name: str, cls: type) -> bool:
        """Whether `name` may be (or already is) `cls`: free, `cls` itself, or the class path `cls` is loaded from."""
        entry = self._entries.get(name, cls)
        return entry is cls or entry == class_path_of(cls)

    def load_class_named(self, class_name: str) -> None:
        """Load the built-in whose class is called `class_name` (a bare name in a config), if one is."""
        for name, entry in list(self._entries.items()):
            if isinstance(entry, str) and entry.rpartition(".")[2] == class_name:
                self[name]  # reading the entry imports its module

    def __repr__(self) -> str:
        return f"LazyClassRegistry({self.kind!r}, {sorted(self._entries)})"
