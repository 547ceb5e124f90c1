"""`model.position`: which position method a model trains with, and that method's options, as one typed object.

Training configs name it the way they name data sources, `class_path` + `init_args`:

    model:
      position:
        class_path: RepoPosition
        init_args: {start_layer: 5, curriculum_start: 1.0, curriculum_steps: 100}

or on the command line `--model.position RepoPosition --model.position.start_layer 5`. A bare method name
(`position: r2n1`, `--model.position rope`) is short for that method with default options.

A policy with options declares its own subclass (its `Options`), in its own file: REPO's is
`repo_policy.RepoPosition`. Methods without options are `PositionMethod(name=...)`. The object maps to the
fields a model's config.json keeps (`position_method`, `position_options` and, for REPO, `repo_start_layer`
and `repo_hidden_size`), which stay as they were so that every saved model still loads.
"""

from __future__ import annotations

import dataclasses
from abc import ABC
from collections.abc import Mapping
from typing import Any, ClassVar

from repo_common.user_code import loaded_subclass, subclasses


class PositionConfig(ABC):
    """Base of every `model.position` class: a dataclass of the method's options.

    Subclasses set `method` (the registered policy name they configure) and may override the two mappings to
    and from a model config when some options are top-level config fields (REPO's layer plan).
    """

    #: The `position_method` this configures (a registered policy's name).
    method: ClassVar[str] = ""

    def model_config_fields(self) -> dict[str, Any]:
        """The `RePoOlmo2Config` fields these options set (position_options replaces a loaded model's)."""
        return {"position_method": self.method, "position_options": self.changed_options()}

    def changed_options(self, *names: str) -> dict[str, Any]:
        """The options (of `names`, default all) whose values differ from their defaults: what config.json keeps."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if (not names or f.name in names) and getattr(self, f.name) != f.default
        }

    @classmethod
    def from_model_config(cls, config: Any) -> PositionConfig:
        """These options as a model config (or anything with its fields) holds them; an unknown key is one line."""
        given = dict(getattr(config, "position_options", None) or {})
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(
                f"position_options: unknown option(s) {unknown} of {cls.method!r}; its options are {known}"
            )
        return cls(**given)

    def to_config(self) -> dict[str, Any]:
        """`{class_path, init_args}` with every field: plain data for YAML, the CLI and checkpoints."""
        return {
            "class_path": f"{type(self).__module__}.{type(self).__qualname__}",
            "init_args": dataclasses.asdict(self),
        }


@dataclasses.dataclass(frozen=True)
class PositionMethod(PositionConfig):
    """A position method that takes no options: rope, nope, r2n1, n2r1, or a registered policy's name."""

    name: str = "rope"
    """The method (`python -m repo_train fit --help` and docs/training.md list them)."""

    def model_config_fields(self) -> dict[str, Any]:
        return {"position_method": self.name, "position_options": {}}


def position_class(class_path: str, where: str) -> type[PositionConfig]:
    """The loaded `PositionConfig` subclass a class_path names: its class name or its module path.

    Only loaded classes are looked up (a checkpoint or config is not trusted to name modules to import); a
    user's class is loaded by `--import MODULE`.
    """
    found = loaded_subclass(PositionConfig, class_path)
    if found is not None:
        return found
    names = ", ".join(sorted(c.__name__ for c in subclasses(PositionConfig)))
    raise ValueError(
        f"{where}: class_path {class_path!r} is not a position config; name one of {names}, or load your own "
        "with --import MODULE"
    )


def position_from_mapping(value: Mapping[str, Any], where: str) -> PositionConfig:
    """`{class_path, init_args}` as an object, each mistake one line."""
    unknown = sorted(set(value) - {"class_path", "init_args"})
    if unknown or "class_path" not in value:
        problem = f"unknown key(s) {unknown}" if unknown else "no class_path"
        raise ValueError(f"{where}: {problem}; a position is a method name or {{class_path: ..., init_args: {{...}}}}")
    cls = position_class(value["class_path"], where)
    options = dict(value.get("init_args") or {})
    known = [f.name for f in dataclasses.fields(cls)]
    wrong = sorted(set(options) - set(known))
    if wrong:
        raise ValueError(f"{where}: unknown {cls.__name__} option(s) {wrong}; its options are {known}")
    return cls(**options)
