"""The scale file: what an LPES search hands to evaluation (one RoPE scale per layer, plus how it was found).

The format (`format_version` 1, every field) and its reader and field checks
are in `evaluation.methods.lpes.scale_file_format`, beside evaluation's `lpes`
method, including the check that for curve types `scales` follow the control
points (the same check whenever evaluation's `lpes` method reads a file with a
curve). This module writes scale files (`ScaleFile`, `write_scale_file`) and
reads them whole (`load_scale_file`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evaluation.methods.lpes.scale_file_format import (
    FORMAT_VERSION,
    REQUIRED_KEYS,
    ScaleFileError,
    read_scale_json,
    validate_scale_data,
)
from repo_common import atomic
from search.fitness import FitnessResult, SubsetWeights
from search.genome import Genome, SearchSpace


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
        return {key: getattr(self, key) for key in REQUIRED_KEYS}

    @classmethod
    def from_json(cls, data: Any, expected_num_layers: int | None = None, source: str = "scale file") -> ScaleFile:
        """Validate `data` field by field; raise `ScaleFileError` naming the first problem and its fix."""
        validate_scale_data(data, source)  # every field, and the scales follow the curve
        if expected_num_layers is not None and data["num_layers"] != expected_num_layers:
            raise ScaleFileError(
                f"{source} has {data['num_layers']} layers, model has {expected_num_layers}: "
                "run the search for this model"
            )
        return cls(**{key: data[key] for key in REQUIRED_KEYS})


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
    return atomic.write_json_atomic(path, data)  # a full disk names the file


def load_scale_file(path: str | os.PathLike, expected_num_layers: int | None = None) -> ScaleFile:
    """Read and validate a scale file; `expected_num_layers` is the model's layer count, if known."""
    return ScaleFile.from_json(read_scale_json(path), expected_num_layers, source=f"scale file {Path(path)}")
