"""The scale file: what an LPES search hands to evaluation (one RoPE scale per layer, plus how it was found).

JSON, `format_version` 1:

    {"format_version": 1, "num_layers": L,
     "curve": {"type": "bezier" | "linear" | "step" | "none", "degree": d or null},
     "control_points": [[x_0, y_0], …],        # [] for "none" (brute force / hand-made scales)
     "scales": [s_0, …, s_{L−1}],              # what evaluation applies; positions / s_h
     "fitness": {"overall": F, "per_subset": {"begin": …, "middle": …, "end": …}},
     "model": {"name": …, "config_sha256": …},
     "search": {"ga": {…}, "seed": …, "weights": {…}, "data_sha256": …, "generations": …, "wall_time_s": …}}

`load_scale_file` checks every field and names the problem and the fix; for
curve types it also checks that `scales` follow the control points, so a
hand-edited file cannot silently disagree with itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from search.bezier import CURVES, MAX_POINTS, MIN_POINTS, curve_scales
from search.fitness import FitnessResult, SubsetWeights
from search.genome import Genome, SearchSpace

FORMAT_VERSION = 1
_REQUIRED = ("format_version", "num_layers", "curve", "control_points", "scales", "fitness", "model", "search")
_SEARCH_KEYS = ("ga", "seed", "weights", "data_sha256", "generations", "wall_time_s")
_CURVE_TOLERANCE = 1e-6
_REGENERATE = "regenerate it with `python -m search run`"


class ScaleFileError(ValueError):
    """A scale file that cannot be used; the message says what is wrong and how to fix it."""


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write JSON through a temporary file in the same directory and `os.replace`: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def config_sha256(config: Any) -> str:
    """sha256 of a model config: a HF config object, a dict, or a path to config.json (or its directory).

    Hashes the canonical JSON (sorted keys) with `transformers_version`
    dropped, so the same config hashes alike whichever way it arrives.
    """
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        config = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    elif hasattr(config, "to_dict"):
        config = config.to_dict()
    if not isinstance(config, dict):
        raise TypeError(f"config_sha256 takes a HF config, a dict or a path, got {type(config).__name__}")
    canonical = {k: v for k, v in config.items() if k != "transformers_version"}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class ScaleFile:
    """The contents of a scale file (see the module docstring); build, then `write_scale_file`."""

    num_layers: int
    curve: dict[str, Any]
    control_points: list[list[float]]
    scales: list[float]
    fitness: dict[str, Any]
    model: dict[str, Any]
    search: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_genome(
        cls, space: SearchSpace, genome: Genome, fitness: FitnessResult, model: dict[str, Any], search: dict[str, Any]
    ) -> ScaleFile:
        """The scale file of a searched genome; `model` = {"name", "config_sha256"}, `search` from `search_section`."""
        curve = {"type": space.curve, "degree": space.num_points - 1 if space.uses_curve else None}
        return cls(
            space.num_layers, curve, genome.control_points(), space.scales(genome), fitness.to_json(), model, search
        )

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _REQUIRED}

    @classmethod
    def from_json(cls, data: Any, expected_num_layers: int | None = None, source: str = "scale file") -> ScaleFile:
        """Validate `data` field by field; raise `ScaleFileError` naming the first problem and its fix."""
        _validate(data, source)
        if expected_num_layers is not None and data["num_layers"] != expected_num_layers:
            raise ScaleFileError(
                f"{source} has {data['num_layers']} layers, model has {expected_num_layers}: "
                "run the search for this model"
            )
        return cls(**{key: data[key] for key in _REQUIRED})


def search_section(
    config: Any, weights: SubsetWeights, data_sha256: str, generations: int, wall_time_s: float, **extra: Any
) -> dict[str, Any]:
    """The `search` record: GA settings (a `GAConfig`), its seed, λ of Eq. 7, search-data hash, budget used."""
    ga = asdict(config)
    return {
        "ga": ga,
        "seed": ga["seed"],
        "weights": weights.as_dict(),
        "data_sha256": data_sha256,
        "generations": generations,
        "wall_time_s": wall_time_s,
        **extra,
    }


def write_scale_file(path: str | os.PathLike, scale_file: ScaleFile) -> Path:
    """Validate, then write atomically. Returns the path."""
    data = json.loads(json.dumps(scale_file.to_json()))  # exactly what a reader will see
    ScaleFile.from_json(data, source=f"scale file for {path}")
    return write_json_atomic(path, data)


def load_scale_file(path: str | os.PathLike, expected_num_layers: int | None = None) -> ScaleFile:
    """Read and validate a scale file; `expected_num_layers` is the model's layer count, if known."""
    path = Path(path)
    if not path.is_file():
        raise ScaleFileError(f"no scale file at {path}: pass the path `python -m search run` wrote")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ScaleFileError(f"{path} is not valid JSON ({exc}): {_REGENERATE}") from exc
    return ScaleFile.from_json(data, expected_num_layers, source=f"scale file {path}")


def _fail(source: str, problem: str, fix: str = _REGENERATE) -> None:
    raise ScaleFileError(f"{source}: {problem}; {fix}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _validate(data: Any, source: str) -> None:
    if not isinstance(data, dict):
        _fail(source, f"top level must be a JSON object, got {type(data).__name__}")
    version = data.get("format_version")
    if version is None:
        _fail(source, "lacks 'format_version'", "it is not an LPES scale file, or " + _REGENERATE)
    if version != FORMAT_VERSION:
        _fail(
            source,
            f"format_version {version!r} is not supported (this code reads {FORMAT_VERSION})",
            "use the repo-train version that wrote it, or " + _REGENERATE,
        )
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        _fail(source, f"lacks {missing}")
    num_layers = data["num_layers"]
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        _fail(source, f"num_layers must be a positive integer, got {num_layers!r}")
    scales = data["scales"]
    if not isinstance(scales, list) or not all(_is_number(s) for s in scales):
        _fail(source, "scales must be a list of finite numbers")
    if len(scales) != num_layers:
        _fail(
            source,
            f"has {len(scales)} scales but num_layers = {num_layers}",
            "one scale per layer is needed; " + _REGENERATE,
        )
    bad = [(i, s) for i, s in enumerate(scales) if s <= 0]
    if bad:
        _fail(source, f"scales must be > 0 (positions are divided by them), got (layer, scale) {bad[:5]}")
    _validate_curve(data, source)
    _validate_sections(data, source)


def _validate_curve(data: dict[str, Any], source: str) -> None:
    curve, points, num_layers = data["curve"], data["control_points"], data["num_layers"]
    if not isinstance(curve, dict) or "type" not in curve or "degree" not in curve:
        _fail(source, f"curve must be an object with 'type' and 'degree', got {curve!r}")
    if not isinstance(points, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(_is_number(v) for v in p) for p in points
    ):
        _fail(source, "control_points must be a list of [x, y] number pairs")
    kind = curve["type"]
    if kind == "none":
        if points or curve["degree"] is not None:
            _fail(source, "curve type 'none' (per-layer scales) takes no control points and degree null")
        return
    if kind not in CURVES:
        _fail(source, f"unknown curve type {kind!r}", f"use one of {sorted(CURVES)} or 'none'")
    if not MIN_POINTS <= len(points) <= MAX_POINTS or curve["degree"] != len(points) - 1:
        _fail(
            source,
            f"a {kind} curve needs {MIN_POINTS}–{MAX_POINTS} control points and degree = points − 1, "
            f"got {len(points)} points and degree {curve['degree']!r}",
        )
    xs = [p[0] for p in points]
    if any(b <= a for a, b in pairwise(xs)) or xs[0] < 0 or xs[-1] > num_layers - 1:
        _fail(source, f"control x {xs} must increase strictly within [0, {num_layers - 1}] (Eq. 11)")
    expected = curve_scales(kind, xs, [p[1] for p in points], num_layers)
    worst = max(abs(a - b) for a, b in zip(expected, data["scales"]))
    if worst > _CURVE_TOLERANCE:
        _fail(
            source,
            f"scales differ from the {kind} curve through control_points by up to {worst:.3g}",
            "regenerate the file, or set curve type 'none' with control_points [] for hand-made scales",
        )


def _validate_sections(data: dict[str, Any], source: str) -> None:
    fitness = data["fitness"]
    if not isinstance(fitness, dict) or not _is_number(fitness.get("overall")):
        _fail(source, "fitness.overall must be a finite number")
    per_subset = fitness.get("per_subset")
    if not isinstance(per_subset, dict) or not all(_is_number(v) for v in per_subset.values()):
        _fail(source, "fitness.per_subset must map subset names to finite numbers")
    model = data["model"]
    if not isinstance(model, dict) or not isinstance(model.get("name"), str) or not model["name"]:
        _fail(source, "model.name must be the model's name or path")
    digest = model.get("config_sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        _fail(
            source,
            f"model.config_sha256 must be 64 lowercase hex digits, got {digest!r}",
            "compute it with search.scale_file.config_sha256(model.config)",
        )
    search = data["search"]
    if not isinstance(search, dict):
        _fail(source, "search must be an object")
    missing = [key for key in _SEARCH_KEYS if key not in search]
    if missing:
        _fail(source, f"search lacks {missing}")
