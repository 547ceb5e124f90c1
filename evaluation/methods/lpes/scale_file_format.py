"""The LPES scale file format: one RoPE scale per layer, plus how it was found.

Shared by `search` (which writes the files, search/scale_file_writer.py) and the
`lpes` method beside this module (which applies them): `search` imports
`evaluation`, never the reverse, so the format lives here.

JSON, `format_version` 1:

    {"format_version": 1, "num_layers": L,
     "curve": {"type": "bezier" | "linear" | "step" | "none", "degree": d or null},
     "control_points": [[x_0, y_0], …],        # [] for "none" (brute force / hand-made scales)
     "scales": [s_0, …, s_{L−1}],              # what evaluation applies; positions / s_h
     "fitness": {"overall": F, "per_subset": {"begin": …, "middle": …, "end": …}},
     "model": {"name": …, "config_sha256": …},
     "search": {"ga": {…}, "seed": …, "weights": {…}, "data_sha256": …, "generations": …, "wall_time_s": …}}

`validate_scale_data` checks every field and names the problem and the fix,
including that `scales` follow the curve through the control points
(`evaluation.methods.lpes.curves`), so a hand-edited file cannot silently
disagree with itself. With `complete=False` (what applying the scales needs:
evaluation's `lpes` method) `format_version`, `num_layers` and `scales` must
be there, and `curve` / `control_points` are checked the same way whenever
the file has them; a hand-made file of scales alone stays usable.
"""

from __future__ import annotations

import json
import math
import os
from itertools import pairwise
from pathlib import Path
from typing import Any, NoReturn

from evaluation.methods.lpes.curves import CURVES, MAX_POINTS, MIN_POINTS, curve_scales
from repo_train.modeling.scaling import MAX_SCALE, MIN_SCALE

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "num_layers", "curve", "control_points", "scales", "fitness", "model", "search")
#: What applying the scales needs (`complete=False`).
SCALE_KEYS = ("format_version", "num_layers", "scales")
SEARCH_KEYS = ("ga", "seed", "weights", "data_sha256", "generations", "wall_time_s")
REGENERATE = "regenerate it with `python -m search run`"
#: Largest |scale − curve(control points)| a file may have (the JSON round trip of float64 is exact).
CURVE_TOLERANCE = 1e-6


class ScaleFileError(ValueError):
    """A scale file that cannot be used; the message says what is wrong and how to fix it."""


def fail(source: str, problem: str, fix: str = REGENERATE) -> NoReturn:
    """Raise `ScaleFileError` as "SOURCE: PROBLEM; FIX"."""
    raise ScaleFileError(f"{source}: {problem}; {fix}")


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_scale_json(path: str | os.PathLike, context: str = "") -> Any:
    """The parsed JSON of a scale file, not yet validated; `context` (e.g. "lpes") prefixes the errors."""
    path = Path(path)
    lead = f"{context}: " if context else ""
    if not path.is_file():
        raise ScaleFileError(f"{lead}no scale file at {path}: pass the path `python -m search run` wrote")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ScaleFileError(f"{lead}{path} is not valid JSON ({exc}): {REGENERATE}") from exc
    except UnicodeDecodeError:
        raise ScaleFileError(f"{lead}{path} is not a scale file (binary, not JSON text): {REGENERATE}") from None
    except RecursionError:
        raise ScaleFileError(
            f"{lead}{path} nests its JSON thousands of levels deep: not a scale file; {REGENERATE}"
        ) from None


def read_scale_file(path: str | os.PathLike, *, complete: bool = True, context: str = "") -> dict[str, Any]:
    """Read and validate a scale file (see `validate_scale_data`); returns the JSON object."""
    data = read_scale_json(path, context)
    lead = f"{context}: " if context else ""
    validate_scale_data(data, f"{lead}scale file {path}", complete=complete)
    return data


def validate_scale_data(data: Any, source: str, *, complete: bool = True) -> None:
    """Raise `ScaleFileError` naming the first problem of `data` and its fix.

    `complete=False` requires only `format_version`, `num_layers` and
    `scales` (what applying the file needs) and checks `curve` and
    `control_points` (and that the scales follow them) when present;
    `complete=True` requires and checks every field.
    """
    if not isinstance(data, dict):
        fail(source, f"top level must be a JSON object, got {type(data).__name__}")
    version = data.get("format_version")
    if version is None:
        fail(source, "lacks 'format_version'", "it is not an LPES scale file, or " + REGENERATE)
    if version != FORMAT_VERSION:
        fail(
            source,
            f"format_version {version!r} is not supported (this code reads {FORMAT_VERSION})",
            "use the repo-train version that wrote it, or " + REGENERATE,
        )
    missing = [key for key in (REQUIRED_KEYS if complete else SCALE_KEYS) if key not in data]
    if missing:
        fail(source, f"lacks {missing}")
    num_layers = data["num_layers"]
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        fail(source, f"num_layers must be a positive integer, got {num_layers!r}")
    scales = data["scales"]
    if not isinstance(scales, list) or not all(is_number(s) for s in scales):
        fail(source, "scales must be a list of finite numbers")
    if len(scales) != num_layers:
        fail(
            source,
            f"has {len(scales)} scales but num_layers = {num_layers}",
            "one scale per layer is needed; " + REGENERATE,
        )
    bad = [(i, s) for i, s in enumerate(scales) if not MIN_SCALE <= s <= MAX_SCALE]
    if bad:
        fail(
            source,
            f"scales must lie within [{MIN_SCALE:g}, {MAX_SCALE:g}] (positions are divided by them), "
            f"got (layer, scale) {bad[:5]}",
        )
    if complete or "curve" in data or "control_points" in data:
        missing = [key for key in ("curve", "control_points") if key not in data]
        if missing:
            fail(source, f"has {'control_points' if missing == ['curve'] else 'curve'} but lacks {missing}")
        _validate_curve_shape(data, source)
        validate_curve(data, source)
    if complete:
        _validate_sections(data, source)


def _validate_curve_shape(data: dict[str, Any], source: str) -> None:
    curve, points = data["curve"], data["control_points"]
    if not isinstance(curve, dict) or "type" not in curve or "degree" not in curve:
        fail(source, f"curve must be an object with 'type' and 'degree', got {curve!r}")
    if not isinstance(points, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(is_number(v) for v in p) for p in points
    ):
        fail(source, "control_points must be a list of [x, y] number pairs")
    if curve["type"] == "none" and (points or curve["degree"] is not None):
        fail(source, "curve type 'none' (per-layer scales) takes no control points and degree null")


def validate_curve(data: dict[str, Any], source: str) -> None:
    """The curve type is known and `scales` follow it through the control points (shapes already checked)."""
    curve, points, num_layers = data["curve"], data["control_points"], data["num_layers"]
    kind = curve["type"]
    if kind == "none":
        return
    if kind not in CURVES:
        fail(source, f"unknown curve type {kind!r}", f"use one of {sorted(CURVES)} or 'none'")
    if not MIN_POINTS <= len(points) <= MAX_POINTS or curve["degree"] != len(points) - 1:
        fail(
            source,
            f"a {kind} curve needs {MIN_POINTS}–{MAX_POINTS} control points and degree = points − 1, "
            f"got {len(points)} points and degree {curve['degree']!r}",
        )
    xs = [p[0] for p in points]
    if any(b <= a for a, b in pairwise(xs)) or xs[0] < 0 or xs[-1] > num_layers - 1:
        fail(source, f"control x {xs} must increase strictly within [0, {num_layers - 1}] (Eq. 11)")
    expected = curve_scales(kind, xs, [p[1] for p in points], num_layers)
    worst = max(abs(a - b) for a, b in zip(expected, data["scales"]))
    if worst > CURVE_TOLERANCE:
        fail(
            source,
            f"scales differ from the {kind} curve through control_points by up to {worst:.3g}",
            "regenerate the file, or set curve type 'none' with control_points [] for hand-made scales",
        )


def _validate_sections(data: dict[str, Any], source: str) -> None:
    fitness = data["fitness"]
    if not isinstance(fitness, dict) or not is_number(fitness.get("overall")):
        fail(source, "fitness.overall must be a finite number")
    per_subset = fitness.get("per_subset")
    if not isinstance(per_subset, dict) or not all(is_number(v) for v in per_subset.values()):
        fail(source, "fitness.per_subset must map subset names to finite numbers")
    model = data["model"]
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) or not model["name"]:
        fail(source, "model.name must be the model's name or path")
    digest = model.get("config_sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        fail(
            source,
            f"model.config_sha256 must be 64 lowercase hex digits, got {digest!r}",
            "compute it with search.scale_file_writer.config_sha256(model.config)",
        )
    search = data["search"]
    if not isinstance(search, dict):
        fail(source, "search must be an object")
    missing = [key for key in SEARCH_KEYS if key not in search]
    if missing:
        fail(source, f"search lacks {missing}")
