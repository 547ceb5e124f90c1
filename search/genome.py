"""The LPES search space (App. B, Table 7): what a genome is, when it is valid, and how it is written down.

A curve genome is d+1 control points `P_k = (x_k, y_k)`:

- x_k integers with `0 ≤ x_0 < x_1 < … < x_d ≤ L − 1` (Eq. 11);
- y_k in {1.0, 1.1, …, 2.0}, stored as integer tenths (10..20) so that
  mutation never accumulates float drift and genomes hash exactly.

The search starts from `x_k = round(k (L − 1) / d)`, `y_k = 1.5` (rounding
half up). The brute-force ablation of the paper (no curve) is the second
genome kind, `LayerGenome`: one y per layer on the same 0.1 grid, selected by
`SearchSpace(curve="none")`. Both kinds have a canonical `key()` (the fitness
cache key) and a JSON form that round-trips exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np

#: Table 7: scales from 1.0 to 2.0 in steps of 0.1, as integer tenths.
Y_MIN_TENTHS = 10
Y_MAX_TENTHS = 20
INITIAL_Y_TENTHS = 15
#: `SearchSpace.curve` value of the brute-force ablation (one free scale per layer).
NO_CURVE = "none"


@dataclass(frozen=True)
class CurveGenome:
    """Control points of one curve: integer x, y in tenths."""

    xs: tuple[int, ...]
    ys: tuple[int, ...]
    kind: ClassVar[str] = "curve"

    def key(self) -> tuple:
        return (self.kind, self.xs, self.ys)

    def control_points(self) -> list[list[float]]:
        """`[[x_k, y_k], …]` with y as a float (the scale file's form)."""
        return [[x, y / 10] for x, y in zip(self.xs, self.ys)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "x": list(self.xs), "y_tenths": list(self.ys)}


@dataclass(frozen=True)
class LayerGenome:
    """Brute-force ablation: one scale per layer (in tenths), no curve."""

    ys: tuple[int, ...]
    kind: ClassVar[str] = "layers"

    def key(self) -> tuple:
        return (self.kind, self.ys)

    def control_points(self) -> list[list[float]]:
        return []

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "y_tenths": list(self.ys)}


Genome = CurveGenome | LayerGenome


def genome_from_json(data: dict[str, Any]) -> Genome:
    """Inverse of `to_json`; a clear error for anything else."""
    kind = data.get("kind") if isinstance(data, dict) else None
    try:
        if kind == CurveGenome.kind:
            return CurveGenome(tuple(int(v) for v in data["x"]), tuple(int(v) for v in data["y_tenths"]))
        if kind == LayerGenome.kind:
            return LayerGenome(tuple(int(v) for v in data["y_tenths"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed {kind} genome {data!r}: {exc}") from exc
    raise ValueError(f"unknown genome {data!r}: expected kind 'curve' (x, y_tenths) or 'layers' (y_tenths)")


@dataclass(frozen=True)
class SearchSpace:
    """Which genomes exist for a model of `num_layers` layers (Table 7)."""

    num_layers: int
    """L, the number of decoder layers (one scale each)."""
    num_points: int = 4
    """Control points d + 1 (2–5); ignored when `curve` is "none"."""
    curve: str = "bezier"
    """An `evaluation.methods.lpes.curves.CURVES` name, or "none" for the brute-force ablation (one free y per layer)."""
    y_min_tenths: int = Y_MIN_TENTHS
    """Smallest scale, in tenths (10 = 1.0)."""
    y_max_tenths: int = Y_MAX_TENTHS
    """Largest scale, in tenths (20 = 2.0)."""

    def __post_init__(self) -> None:
        # evaluation.methods (the curves' package) loads every method, with torch and transformers
        from evaluation.methods.lpes.curves import CURVES, MAX_POINTS, MIN_POINTS  # heavy: keeps --help fast

        if self.num_layers < 2:
            raise ValueError(f"LPES needs a model with >= 2 layers, got num_layers={self.num_layers}")
        if self.curve != NO_CURVE and self.curve not in CURVES:
            raise ValueError(f"unknown curve {self.curve!r}; choose one of {sorted(CURVES)} or {NO_CURVE!r}")
        if self.curve != NO_CURVE and not MIN_POINTS <= self.num_points <= MAX_POINTS:
            raise ValueError(f"num_points must be {MIN_POINTS}–{MAX_POINTS}, got {self.num_points}")
        if self.curve != NO_CURVE and self.num_points > self.num_layers:
            raise ValueError(
                f"{self.num_points} control points need {self.num_points} distinct integer x in "
                f"[0, {self.num_layers - 1}]: use at most {self.num_layers} points"
            )
        if not 0 < self.y_min_tenths <= self.y_max_tenths:
            raise ValueError(f"need 0 < y_min_tenths <= y_max_tenths, got {self.y_min_tenths}, {self.y_max_tenths}")

    @property
    def uses_curve(self) -> bool:
        return self.curve != NO_CURVE

    def initial(self) -> CurveGenome:
        """The paper's starting individual: `x_k = round(k (L − 1) / d)`, `y_k = 1.5`."""
        if not self.uses_curve:
            raise ValueError("the brute-force space has no initial curve; use random_layers(rng)")
        d, span = self.num_points - 1, self.num_layers - 1
        xs = tuple((2 * k * span + d) // (2 * d) for k in range(d + 1))  # round half up, in integers
        return CurveGenome(xs, (INITIAL_Y_TENTHS,) * (d + 1))

    def random_layers(self, rng: np.random.Generator) -> LayerGenome:
        """Brute force: each layer's scale uniform on the 0.1 grid of [1.0, 2.0] (U(1, 2) on the grid)."""
        ys = rng.integers(self.y_min_tenths, self.y_max_tenths + 1, size=self.num_layers)
        return LayerGenome(tuple(int(y) for y in ys))

    def problems(self, genome: Genome) -> list[str]:
        """Every constraint `genome` breaks (empty when valid)."""
        found: list[str] = []
        if self.uses_curve:
            if not isinstance(genome, CurveGenome):
                return [f"expected a curve genome for curve={self.curve!r}, got {type(genome).__name__}"]
            if len(genome.xs) != self.num_points or len(genome.ys) != self.num_points:
                found.append(f"needs {self.num_points} control points, has x {genome.xs} and y {genome.ys}")
            if any(not 0 <= x <= self.num_layers - 1 for x in genome.xs):
                found.append(f"x {genome.xs} outside [0, {self.num_layers - 1}]")
            if any(b <= a for a, b in pairwise(genome.xs)):
                found.append(f"x {genome.xs} not strictly increasing (Eq. 11)")
        else:
            if not isinstance(genome, LayerGenome):
                return [f"expected a per-layer genome for curve='none', got {type(genome).__name__}"]
            if len(genome.ys) != self.num_layers:
                found.append(f"needs {self.num_layers} per-layer scales, has {len(genome.ys)}")
        if any(not self.y_min_tenths <= y <= self.y_max_tenths for y in genome.ys):
            found.append(f"y (tenths) {genome.ys} outside [{self.y_min_tenths}, {self.y_max_tenths}]")
        return found

    def is_valid(self, genome: Genome) -> bool:
        return not self.problems(genome)

    def check(self, genome: Genome) -> None:
        """Raise a ValueError listing every broken constraint."""
        found = self.problems(genome)
        if found:
            raise ValueError(f"invalid genome {genome.to_json()}: " + "; ".join(found))

    def scales(self, genome: Genome) -> list[float]:
        """The per-layer scales `s_h` a valid genome stands for."""
        self.check(genome)
        if isinstance(genome, LayerGenome):
            return [y / 10 for y in genome.ys]
        ys = [y / 10 for y in genome.ys]
        from evaluation.methods.lpes.curves import curve_scales  # heavy: keeps --help fast (see __post_init__)

        return [float(s) for s in curve_scales(self.curve, genome.xs, ys, self.num_layers)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchSpace:
        return cls(**data)
