"""Metrics over accuracy-by-position curves: per-position accuracy, ρ, worst position, shape.

A lost-in-the-middle evaluation scores every example with the relevant item at
several positions; these functions turn those scores into one number per
position and then into shape summaries: how strongly accuracy follows closeness
to an edge (ρ), how bad the worst position is, how far the middle falls below
the edges, and which shape the curve has given its confidence intervals. Their
uncertainty (clustered by question) is `evaluation.statistics`'s job.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

#: The words `classify_shape` may return.
SHAPES = ("flat", "U", "ramp up", "ramp down", "other")


def accuracy_by_position(records: Iterable[Mapping[str, Any]], score_key: str = "score") -> dict[int, float]:
    """Mean score per `gold_position`, ordered by position; rows are e.g. a task's dataset with a score column."""
    totals: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for row in records:
        if "gold_position" not in row or score_key not in row:
            raise ValueError(
                f"each record needs 'gold_position' and {score_key!r}; got keys {sorted(row)}. "
                f"Add the per-example score as {score_key!r} (or pass score_key=...)"
            )
        position = int(row["gold_position"])
        totals[position] += float(row[score_key])
        counts[position] += 1
    if not counts:
        raise ValueError("accuracy_by_position got no records; score at least one example first")
    return {position: totals[position] / counts[position] for position in sorted(counts)}


def u_shape_rho(positions: Sequence[int], accuracies: Sequence[float], num_positions: int) -> float:
    """ρ_δ,a of CALIOPE: 100 × Pearson correlation between edge-closeness δ and accuracy.

    δ = |t - T/2| / (T/2) with t the 0-based position and T = num_positions - 1, so the
    first and the last item both get δ = 1 and the exact middle δ = 0 (symmetric in the
    positions that exist; T = num_positions would make the last item δ = 1 - 2/k).
    Positive ρ means the edges beat the middle on average — a U-shape, but also a ramp
    whose low end is long (see `classify_shape` for the shape itself); negative ρ the reverse.
    Returns nan with fewer than 2 positions, a single-item context, or constant δ or accuracy,
    where a correlation is undefined.
    """
    if len(positions) != len(accuracies):
        raise ValueError(f"u_shape_rho got {len(positions)} positions but {len(accuracies)} accuracies; pair them")
    if len(positions) < 2 or num_positions < 2:
        return math.nan
    t = np.asarray(positions, dtype=float)
    if t.min() < 0 or t.max() > num_positions - 1:
        raise ValueError(
            f"positions must lie in [0, {num_positions - 1}] for num_positions={num_positions}; got "
            f"{t.min():g}..{t.max():g}. Pass 0-based positions and the number of items in the context"
        )
    return float(u_shape_rho_rows(np.asarray([accuracies], dtype=float), positions, num_positions)[0])


def u_shape_rho_rows(curves: np.ndarray, positions: Sequence[int], num_positions: int) -> np.ndarray:
    """`u_shape_rho` of every row of `curves` [rows, positions] (e.g. bootstrap resamples); nan where undefined."""
    rows = np.full(curves.shape[0], math.nan)
    if len(positions) < 2 or num_positions < 2:
        return rows
    half = (num_positions - 1) / 2
    delta = np.abs(np.asarray(positions, dtype=float) - half) / half
    if np.ptp(delta) == 0:
        return rows
    dc = delta - delta.mean()
    centred = curves - curves.mean(axis=1, keepdims=True)
    norm = np.sqrt((centred**2).sum(axis=1)) * np.sqrt((dc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = 100.0 * (centred @ dc) / norm
    # constant accuracy (up to rounding) has no correlation
    flat = np.ptp(curves, axis=1) <= 1e-12 * np.maximum(1.0, np.abs(curves).max(axis=1))
    return np.where(flat | ~np.isfinite(rho), math.nan, np.clip(rho, -100.0, 100.0))


def worst_position_accuracy(accuracy_by_pos: Mapping[int, float]) -> float:
    """The lowest accuracy over the evaluated positions (what a user gets when the answer lands badly)."""
    if not accuracy_by_pos:
        raise ValueError("worst_position_accuracy got no positions; compute accuracy_by_position first")
    return float(min(accuracy_by_pos.values()))


def middle_minus_edges_gap(accuracy_by_pos: Mapping[int, float]) -> float:
    """Mean accuracy of the interior positions minus the mean of the two edge positions.

    The edges are the smallest and largest evaluated positions (0 and k-1 on every grid of
    the tasks); negative values mean a lost middle. nan with fewer than 3 positions.
    """
    ordered = [accuracy_by_pos[p] for p in sorted(accuracy_by_pos)]
    return float(middle_minus_edges_rows(np.asarray([ordered], dtype=float))[0]) if ordered else math.nan


def middle_minus_edges_rows(curves: np.ndarray) -> np.ndarray:
    """`middle_minus_edges_gap` of every row of `curves` [rows, positions in order]; nan with < 3 positions."""
    middle, edges = middle_and_edges_rows(curves)
    return middle - edges


def middle_and_edges_rows(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean accuracy of the interior positions and of the two edge positions, per row of `curves`.

    The split `middle_minus_edges_gap` subtracts; both are nan with fewer than 3 positions (no middle).
    """
    if curves.shape[1] < 3:
        empty = np.full(curves.shape[0], math.nan)
        return empty, empty.copy()
    return curves[:, 1:-1].mean(axis=1), (curves[:, 0] + curves[:, -1]) / 2


def middle_and_edges(accuracy_by_pos: Mapping[int, float]) -> tuple[float, float]:
    """(middle, edges) accuracy of one curve: the two means `middle_minus_edges_gap` subtracts."""
    ordered = [accuracy_by_pos[p] for p in sorted(accuracy_by_pos)]
    if not ordered:
        return math.nan, math.nan
    middle, edges = middle_and_edges_rows(np.asarray([ordered], dtype=float))
    return float(middle[0]), float(edges[0])


def summarize_positions(accuracy_by_pos: Mapping[int, float], num_positions: int) -> dict[str, float]:
    """Mean accuracy over positions, ρ_δ,a, worst position and middle-minus-edges gap in one dict."""
    if not accuracy_by_pos:
        raise ValueError("summarize_positions got no positions; compute accuracy_by_position first")
    positions = sorted(accuracy_by_pos)
    accuracies = [accuracy_by_pos[p] for p in positions]
    return {
        "mean_accuracy": float(np.mean(accuracies)),
        "rho": u_shape_rho(positions, accuracies, num_positions),
        "worst_accuracy": worst_position_accuracy(accuracy_by_pos),
        "middle_minus_edges": middle_minus_edges_gap(accuracy_by_pos),
    }


def classify_shape(intervals: Mapping[int, tuple[float, float]]) -> str | None:
    """The shape of an accuracy-by-position curve, read from its per-position confidence intervals.

    Position i is *below* j when i's interval lies wholly under j's (high_i < low_j).
    - "flat": one accuracy lies inside every interval (max low ≤ min high): no position differs.
    - "U": some interior position is below both edges (a lost middle).
    - "ramp up": the first position is below the last, no interior one is below the first
      and none above the last ("ramp down": the mirror image).
    - "other": anything else (an inverted U, a zigzag, one edge dropping alone).
    None for fewer than two positions (no curve). Overlapping intervals are a conservative
    criterion: a label other than "flat" means the difference is large for the sample size.
    """
    if len(intervals) < 2:
        return None
    ordered = [intervals[p] for p in sorted(intervals)]
    lows = [low for low, _ in ordered]
    highs = [high for _, high in ordered]
    if max(lows) <= min(highs):
        return "flat"

    def below(i: int, j: int) -> bool:
        return highs[i] < lows[j]

    first, last, interior = 0, len(ordered) - 1, range(1, len(ordered) - 1)
    if any(below(j, first) and below(j, last) for j in interior):
        return "U"
    if below(first, last) and not any(below(j, first) or below(last, j) for j in interior):
        return "ramp up"
    if below(last, first) and not any(below(j, last) or below(first, j) for j in interior):
        return "ramp down"
    return "other"
