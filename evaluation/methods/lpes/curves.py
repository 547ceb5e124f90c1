"""Curves that turn a few control points into one RoPE scaling factor per layer (LPES, Sec. 3 and App. D).

Here, in evaluation's LPES package, because both sides check scale files with
them (`evaluation.methods.lpes.scale_file_format`: the scales follow the curve through
the control points); the search builds its genomes on them (`search/genome.py`).

LPES does not search L free scales: it searches d+1 control points
`P_k = (x_k, y_k)` and reads the scale of layer h off a curve through them.
The curve is Bézier (Eq. 3–4):

    B(t) = Σ_k b_{k,d}(t) P_k,   b_{k,d}(t) = C(d, k) t^k (1 − t)^(d−k),   t ∈ [0, 1].

Layer h sits at `x_h = x_0 + (x_d − x_0) / (L − 1) · h` (Eq. 6), so the layers
always span the curve from its first to its last control point. B gives x and
y as functions of t; the scale of layer h is `s_h = y(t(x_h))` (Eq. 5), where
`t(x)` inverts the x-component. With strictly increasing control x (Eq. 11)
`x'(t) = d Σ_k b_{k,d−1}(t) (x_{k+1} − x_k) > 0`, so x(t) is strictly monotone
and bisection finds the unique t (App. D).

The ablation curves of the paper sample the same layer positions x_h:

- `linear`: piecewise linear through the control points (`numpy.interp`);
- `step`: layer h takes the y of the nearest control point at or to the left
  of x_h (`max{k : x_k ≤ x_h}`, with 1e-9 slack so float round-off in Eq. 6
  never drops a layer that sits exactly on a control point to the previous one).

Every curve takes 2–5 control points (degree 1–4 for Bézier).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import comb

import numpy as np

MIN_POINTS = 2
MAX_POINTS = 5
#: Bisection halvings: 2^-64 is below float64 resolution on [0, 1], so t is exact to round-off.
_BISECTION_STEPS = 64
_STEP_SLACK = 1e-9
_ROUND_DECIMALS = 12


def bernstein_basis(degree: int, t: np.ndarray | float) -> np.ndarray:
    """`b_{k,d}(t)` for k = 0..d (Eq. 4): shape `[*t.shape, d + 1]`, rows sum to 1."""
    if degree < 0:
        raise ValueError(f"Bernstein degree must be >= 0, got {degree}")
    t = np.asarray(t, dtype=np.float64)[..., None]
    k = np.arange(degree + 1)
    coefficients = np.array([comb(degree, int(j)) for j in k], dtype=np.float64)
    # numpy defines 0.0 ** 0 == 1.0, so B(0) = P_0 and B(1) = P_d exactly.
    return coefficients * t**k * (1.0 - t) ** (degree - k)


def bezier_point(xs: Sequence[float], ys: Sequence[float], t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """`B(t) = Σ_k b_{k,d}(t) P_k` (Eq. 3): the x and y components at each t."""
    xs, ys = _as_points(xs, ys)
    basis = bernstein_basis(len(xs) - 1, t)
    return basis @ xs, basis @ ys


def layer_positions(x_first: float, x_last: float, num_layers: int) -> np.ndarray:
    """`x_h = x_0 + (x_d − x_0) / (L − 1) · h` for h = 0..L−1 (Eq. 6)."""
    if num_layers < 2:
        raise ValueError(f"LPES needs at least 2 layers (Eq. 6 divides by L − 1), got {num_layers}")
    h = np.arange(num_layers, dtype=np.float64)
    return x_first + (x_last - x_first) / (num_layers - 1) * h


def solve_t(xs: Sequence[float], targets: np.ndarray | float) -> np.ndarray:
    """`t(x)`: the t in [0, 1] with `x(t) = x` for each target, by bisection on the monotone x(t) (App. D).

    Targets outside `[x_0, x_d]` are clamped to the ends (t = 0 or 1), which
    only absorbs float round-off of Eq. 6 at the last layer.
    """
    xs = np.asarray(xs, dtype=np.float64)
    if xs.ndim != 1 or len(xs) < MIN_POINTS or np.any(np.diff(xs) <= 0):
        raise ValueError(f"t(x) needs >= {MIN_POINTS} strictly increasing control x values, got {xs.tolist()}")
    targets = np.asarray(targets, dtype=np.float64)
    basis_degree = len(xs) - 1
    lo = np.zeros_like(targets)
    hi = np.ones_like(targets)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = bernstein_basis(basis_degree, mid) @ xs < targets
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    t = 0.5 * (lo + hi)
    t = np.where(targets <= xs[0], 0.0, t)
    return np.where(targets >= xs[-1], 1.0, t)


def bezier_scales(xs: Sequence[float], ys: Sequence[float], num_layers: int) -> np.ndarray:
    """`s_h = y(t(x_h))` (Eq. 5) for every layer: the LPES curve."""
    xs, ys = _as_points(xs, ys)
    t = solve_t(xs, layer_positions(xs[0], xs[-1], num_layers))
    # Rounded to 1e-12: the Bernstein sum carries ~1e-16 round-off, and a flat curve should give exactly its y.
    return np.round(bernstein_basis(len(xs) - 1, t) @ ys, _ROUND_DECIMALS)


def linear_scales(xs: Sequence[float], ys: Sequence[float], num_layers: int) -> np.ndarray:
    """Ablation: piecewise linear through the control points, sampled at the Eq. 6 positions."""
    xs, ys = _as_points(xs, ys)
    return np.interp(layer_positions(xs[0], xs[-1], num_layers), xs, ys)


def step_scales(xs: Sequence[float], ys: Sequence[float], num_layers: int) -> np.ndarray:
    """Ablation: layer h takes y_k of the last control point with `x_k ≤ x_h` (see module docstring)."""
    xs, ys = _as_points(xs, ys)
    positions = layer_positions(xs[0], xs[-1], num_layers)
    index = np.searchsorted(xs, positions + _STEP_SLACK, side="right") - 1
    return ys[np.clip(index, 0, len(xs) - 1)]


CurveFunction = Callable[[Sequence[float], Sequence[float], int], np.ndarray]

#: Curve types by name; each maps (control x, control y, L) to L scales.
CURVES: dict[str, CurveFunction] = {"bezier": bezier_scales, "linear": linear_scales, "step": step_scales}


def curve_scales(curve: str, xs: Sequence[float], ys: Sequence[float], num_layers: int) -> np.ndarray:
    """The scales of `curve` through the control points, one per layer."""
    if curve not in CURVES:
        raise ValueError(f"unknown curve type {curve!r}; choose one of {sorted(CURVES)}")
    return CURVES[curve](xs, ys, num_layers)


def _as_points(xs: Sequence[float], ys: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape:
        raise ValueError(f"control x and y must be 1-D and of equal length, got {xs.shape} and {ys.shape}")
    if not MIN_POINTS <= len(xs) <= MAX_POINTS:
        raise ValueError(f"curves take {MIN_POINTS}–{MAX_POINTS} control points, got {len(xs)}")
    if np.any(np.diff(xs) <= 0):
        raise ValueError(f"control x must be strictly increasing (Eq. 11), got {xs.tolist()}")
    return xs, ys
