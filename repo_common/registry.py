"""The one way the project names its pluggable parts: a `Registry`, name -> class (or factory).

Tasks (`evaluation.tasks.TASKS`), position methods (`evaluation.methods.METHODS`), trainable position
policies (`repo_train.modeling.POSITION_POLICIES`), model presets (`repo_train.modeling.presets.PRESETS`) and
training data sources (`repo_train.data.DATA_SOURCES`) are each one. A part is added by its registry's
decorator (`@register_task`, `@register_method`, `@register_policy`, `@register_preset(NAME)`,
`@register_data_source`), whether it is built in or a user's, named with `--import`; a config or a command
line then names it.

A built-in may be listed by its import path ("evaluation.methods.pi.PositionInterpolation") and is imported when
its entry is first read: `--help`, `--print_config` and a refusal of an unknown name read only the names, and
never import a module that loads torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def class_path_of(obj: Any) -> str:
    """`module.QualifiedName` of a class or function: what a config's class_path names."""
    return f"{obj.__module__}.{obj.__qualname__}"


#: What the short spec syntax (`NAME:key=value,key2=value2+NAME2`) reads as structure, so no name may hold it.
SPEC_SYNTAX = frozenset("+:,=")


class Registry(MutableMapping[str, T], Generic[T]):
    """`name -> class`, as a dict; an entry given as an import path is imported when it is first read."""

    def __init__(self, kind: str, builtins: Mapping[str, str | T] | None = None):
        self.kind = kind
        self._entries: dict[str, T | str] = dict(builtins or {})

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.rpartition(".")
            loaded = getattr(importlib.import_module(module), attribute)  # its module may register it as it loads
            self._entries[name] = entry = loaded
        return entry

    def __setitem__(self, name: str, obj: T) -> None:
        self._entries[name] = obj

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def register(self, obj: T, name: str | None = None) -> T:
        """Add `obj` under `name` (default: its `name` attribute); a name taken by another is refused."""
        name = getattr(obj, "name", None) if name is None else name
        if not isinstance(name, str) or not name:
            raise TypeError(f"{class_path_of(obj)} needs a class attribute `name` (its {self.kind} name in configs)")
        unnameable = sorted({c for c in name if c in SPEC_SYNTAX or c.isspace()})
        if unnameable:
            raise ValueError(
                f"{self.kind} name {name!r} holds {' '.join(repr(c) for c in unnameable)}, which a spec "
                "(NAME:key=value,...+NAME2) cannot name; register it under a name of letters, digits, '_', '-' or '.'"
            )
        if not self.holds(name, obj):
            raise ValueError(
                f"{self.kind} {name!r} is already {self.class_path(name)}; give {obj.__name__} another name"
            )
        self._entries[name] = obj
        return obj

    def check_name(self, name: str) -> str:
        """`name` if registered, else a one-line ValueError listing the registered names; imports nothing."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; registered {self.kind}s are {sorted(self._entries)}")
        return name

    def lookup(self, name: str) -> T:
        """The entry called `name` (imported if need be), or `check_name`'s one-line ValueError."""
        return self[self.check_name(name)]

    def class_path(self, name: str) -> str:
        """The import path of `name`'s entry, without importing it (what `--help` lists)."""
        entry = self._entries[name]
        return entry if isinstance(entry, str) else class_path_of(entry)

    def holds(self, name: str, obj: Any) -> bool:
        """Whether `name` may be (or already is) `obj`: free, `obj` itself, or the import path `obj` is loaded from."""
        entry = self._entries.get(name, obj)
        return entry is obj or entry == class_path_of(obj)

    def name_of(self, obj: Any) -> str | None:
        """The name `obj` is registered under (itself, or the import path it is loaded from), else None; imports
        nothing. What a config names by class_path is then written under its registry name."""
        path = class_path_of(obj)
        return next((name for name, entry in self._entries.items() if entry is obj or entry == path), None)

    def load_class_named(self, class_name: str) -> None:
        """Import the built-in whose class is called `class_name` (a bare name in a config), if one is."""
        for name, entry in list(self._entries.items()):
            if isinstance(entry, str) and entry.rpartition(".")[2] == class_name:
                self[name]  # reading the entry imports its module

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"
