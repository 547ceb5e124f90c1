"""Metrics over accuracy-by-position curves, and the uncertainty of accuracies.

A lost-in-the-middle evaluation scores every example with the relevant item at
several positions; these functions turn those scores into one number per
position, then into shape summaries (how U-shaped, how bad the worst position,
how far the middle falls below the edges) and into confidence intervals, so a
method is compared with a baseline on the same examples (a paired test) rather
than by eye.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: Resampled means per chunk are computed from at most this many drawn indices, bounding memory.
_MAX_DRAWS_PER_CHUNK = 2_000_000


class MeanStd(NamedTuple):
    """Mean and sample standard deviation (ddof=1) of a metric over `n` seeds."""

    mean: float
    std: float
    n: int


class ConfidenceInterval(NamedTuple):
    """The observed mean and a percentile-bootstrap interval [low, high] around it."""

    mean: float
    low: float
    high: float


class PairedBootstrapResult(NamedTuple):
    """Mean of method - baseline, its bootstrap interval, and P(resampled difference <= 0)."""

    mean_diff: float
    low: float
    high: float
    p_value: float


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
    Positive ρ means the edges beat the middle (a U-shape), negative an inverted U.
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
    half = (num_positions - 1) / 2
    delta = np.abs(t - half) / half
    acc = np.asarray(accuracies, dtype=float)
    if np.ptp(delta) == 0 or np.ptp(acc) == 0:
        return math.nan
    return float(100.0 * np.corrcoef(delta, acc)[0, 1])


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
    if len(accuracy_by_pos) < 3:
        return math.nan
    ordered = [accuracy_by_pos[p] for p in sorted(accuracy_by_pos)]
    return float(np.mean(ordered[1:-1]) - (ordered[0] + ordered[-1]) / 2)


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


def mean_std_over_seeds(values: Sequence[float]) -> MeanStd:
    """Mean and sample std (ddof=1) of one metric measured under several seeds; std is nan for one seed."""
    if len(values) == 0:
        raise ValueError("mean_std_over_seeds got no values; pass one metric value per seed")
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    return MeanStd(float(arr.mean()), std, int(arr.size))


def _check_bootstrap_args(n_resamples: int, alpha: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}; 1000 or more is usual")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}; 0.05 gives a 95% interval")


def _resampled_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Means of `n_resamples` resamples (with replacement, same size) of `values`, in bounded-memory chunks."""
    rng = np.random.default_rng(seed)
    n = values.size
    chunk = max(1, _MAX_DRAWS_PER_CHUNK // n)
    means = np.empty(n_resamples, dtype=float)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means


def bootstrap_ci(
    scores: Sequence[float], n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0
) -> ConfidenceInterval:
    """Percentile-bootstrap (1 - alpha) interval of the mean of per-example scores, resampling examples."""
    _check_bootstrap_args(n_resamples, alpha)
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_ci got no scores; pass one score per example")
    means = _resampled_means(values, n_resamples, seed)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return ConfidenceInterval(float(values.mean()), float(low), float(high))


def paired_bootstrap(
    method_scores: Sequence[float],
    baseline_scores: Sequence[float],
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedBootstrapResult:
    """Paired bootstrap of method - baseline over the same examples (resampled together).

    `p_value` is the fraction of resamples whose mean difference is <= 0: a one-sided
    estimate of how often the method would fail to beat the baseline. Scores must be
    aligned example by example (same ids, same order).
    """
    _check_bootstrap_args(n_resamples, alpha)
    method = np.asarray(method_scores, dtype=float)
    baseline = np.asarray(baseline_scores, dtype=float)
    if method.shape != baseline.shape or method.ndim != 1:
        raise ValueError(
            f"paired_bootstrap needs two equal-length 1-D score lists, got {method.shape} and {baseline.shape}; "
            "score the method and the baseline on the same examples in the same order"
        )
    if method.size == 0:
        raise ValueError("paired_bootstrap got no scores; pass one score per example for each system")
    diffs = method - baseline
    means = _resampled_means(diffs, n_resamples, seed)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return PairedBootstrapResult(float(diffs.mean()), float(low), float(high), float(np.mean(means <= 0)))
