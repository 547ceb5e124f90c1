"""Short labels of method specs for legends and tables: the method and what sets it apart, never a path.

Summaries key methods by their canonical spec, which lists every parameter
(`pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30`) and may hold a file path
(`lpes:scale_file=/runs/x/scales/rope-kv.json`). A reader of a plot needs the
name and the parameters that differ from the method's defaults: `pcd`,
`lpes (rope-kv)`, `caliope (hourglass, delta=5–1000)`. Defaults are the fields
of the dataclass registered in `evaluation.methods.METHODS`; nothing is built,
so no scale file is read and a label never fails.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from evaluation.methods import METHODS
from evaluation.methods.base import parse_method_spec, spec_fields, split_stack_spec

#: A value ending like a file is shown by its stem even without a directory in front.
_FILE_SUFFIX = re.compile(r"\.(json|jsonl|ya?ml|pt|pth|bin|safetensors|npy|npz|txt|csv|gz)$", re.IGNORECASE)


def _is_path(text: str) -> bool:
    return "/" in text or "\\" in text or bool(_FILE_SUFFIX.search(text))


def _stem(text: str) -> str:
    """`/runs/x/scales/rope-kv.json` -> `rope-kv`; `models/rope/` -> `rope`."""
    name = PurePath(text.replace("\\", "/").rstrip("/")).name or text
    while _FILE_SUFFIX.search(name):
        name = _FILE_SUFFIX.sub("", name)
    return name


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return _stem(text) if _is_path(text) else text


def _is_default(value: Any, default: Any) -> bool:
    """Whether a parsed spec value equals a field default (1e-4 and 0.0001 are equal; '5' equals 5)."""
    if default is dataclasses.MISSING:
        return False
    if isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(value, (int, float)):
        return not isinstance(value, bool) and math.isclose(float(value), float(default), rel_tol=1e-12)
    return value == default or (isinstance(default, str) and str(value) == default)


def _join_ranges(items: dict[str, str]) -> dict[str, str]:
    """`delta_min=5, delta_max=1000` -> `delta=5–1000` (also `min_ratio`/`max_ratio`)."""
    out = dict(items)
    for key in items:
        if key.endswith("_min"):
            stem, other = key[: -len("_min")], key[: -len("_min")] + "_max"
        elif key.startswith("min_"):
            stem, other = key[len("min_") :], "max_" + key[len("min_") :]
        else:
            continue
        if other in out:
            out[stem] = f"{out.pop(key)}–{out.pop(other)}"
    return out


def method_label(spec: str) -> str:
    """The short label of one method spec (no '+'): name, then the non-default parameters in brackets.

    A required text parameter shows its value alone (`lpes (rope-kv)`, `caliope (hourglass)`), every
    other one `key=value`; path-like values become the file's stem. An unregistered method keeps all
    its parameters (there are no defaults to compare with); a spec that does not parse is returned as is.
    """
    return _describe(spec)[0]


def _describe(spec: str) -> tuple[str, tuple]:
    """(short label, identity): specs with equal identities configure the method alike (defaults dropped)."""
    try:
        name, params = parse_method_spec(spec)
    except ValueError:
        return spec, (spec,)
    cls = METHODS.get(name)
    fields = {f.name: f for f in spec_fields(cls)} if cls else {}
    bare, keyed, identity = [], {}, [name]
    for key, value in params.items():
        field = fields.get(key)
        default = field.default if field else dataclasses.MISSING
        if field and _is_default(value, default):
            continue
        identity.append((key, str(value)))
        required = field is not None and default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if required and isinstance(value, str):
            bare.append(_show(value))
        else:
            keyed[key] = _show(value)
    shown = bare + [f"{key}={value}" for key, value in _join_ranges(keyed).items()]
    return (f"{name} ({', '.join(shown)})" if shown else name), tuple(identity)


def short_label(spec: str) -> str:
    """The short label of a method or stack spec: `caliope:calibrator=moses+pi:scale=2` -> `caliope (moses) + pi (scale=2)`."""
    return " + ".join(method_label(part) for part in split_stack_spec(spec)) or spec


def short_labels(specs: Sequence[str]) -> dict[str, str]:
    """Short labels of several specs, kept distinct: configurations whose labels coincide get `[1]`, `[2]`, ... .

    Labels coincide when they drop what tells two configurations apart (two scale files named alike in
    different directories); specs that differ only by spelled-out defaults are one configuration and
    share their label.
    """
    unique = list(dict.fromkeys(specs))
    labels = {spec: short_label(spec) for spec in unique}
    identities = {spec: tuple(_describe(part)[1] for part in split_stack_spec(spec)) or (spec,) for spec in unique}
    configurations: dict[str, list[tuple]] = {}
    for spec in unique:
        known = configurations.setdefault(labels[spec], [])
        if identities[spec] not in known:
            known.append(identities[spec])
    for spec in unique:
        known = configurations[labels[spec]]
        if len(known) > 1:
            labels[spec] = f"{labels[spec]} [{known.index(identities[spec]) + 1}]"
    return labels
