"""Uncertainty of accuracies when one question is scored at several positions.

A lost-in-the-middle run evaluates each question (`example_id`) with the gold
item at k positions, giving k records that share the question's difficulty:
they are one independent unit, not k. Every statistic that pools positions is
therefore resampled by question (a cluster bootstrap), and a method is compared
with the baseline by a paired sign-flip test on per-question mean differences.
A statistic of a single position (one record per question) needs no clustering:
`bootstrap_ci` resamples its rows.

All resampling is seeded, so a summary is a deterministic function of its records.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: A chunk of resampling weights or sign patterns holds at most this many entries, bounding memory.
_MAX_ENTRIES_PER_CHUNK = 2_000_000
#: Up to this many non-zero per-question differences the sign-flip test enumerates all 2^m patterns.
EXACT_SIGN_FLIP_MAX = 20
#: Random sign patterns drawn when there are more non-zero differences than that.
DEFAULT_PERMUTATIONS = 20_000


class MeanStd(NamedTuple):
    """Mean and sample standard deviation (ddof=1) of a metric over `n` seeds."""

    mean: float
    std: float
    n: int


class ConfidenceInterval(NamedTuple):
    """The observed value and a percentile-bootstrap interval [low, high] around it."""

    mean: float
    low: float
    high: float


class SignFlipTest(NamedTuple):
    """Two-sided paired sign-flip test of 'no difference' on per-question mean differences."""

    p_value: float
    exact: bool
    n_permutations: int
    n_nonzero: int

    def description(self) -> str:
        how = "exact, all sign patterns" if self.exact else f"Monte Carlo, {self.n_permutations} sign patterns"
        return f"two-sided paired sign-flip test on per-question mean differences ({how})"


#: The most bootstrap resamples one interval may draw: their means are held at once (8 bytes each), and past
#: about 10,000 a percentile interval no longer moves in the digits a report shows.
MAX_RESAMPLES = 1_000_000


def check_bootstrap_args(n_resamples: int, alpha: float, name: str = "n_resamples") -> None:
    if not 1 <= n_resamples <= MAX_RESAMPLES:
        raise ValueError(
            f"{name} must lie in [1, {MAX_RESAMPLES:,}], got {n_resamples}; 1000 is usual (more costs memory and "
            "time, not accuracy)"
        )
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}; 0.05 gives a 95% interval")


def percentile_interval(values: np.ndarray, alpha: float) -> tuple[float, float]:
    """The (alpha/2, 1 - alpha/2) quantiles of the finite values; (nan, nan) when fewer than half are finite.

    Resampled statistics can be undefined (ρ of a resample whose curve is flat); an interval
    built from a minority of defined resamples would describe a different population, so none is given.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0 or finite.size < values.size / 2:
        return math.nan, math.nan
    low, high = np.quantile(finite, [alpha / 2, 1 - alpha / 2])
    return round(float(low), 12), round(float(high), 12)  # no -5e-17 for a difference that is 0 in every resample


def resampling_weights(n_units: int, n_resamples: int, seed: int):
    """Yield chunks of bootstrap weights [chunk, n_units]: how often each unit is drawn in each resample."""
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_ENTRIES_PER_CHUNK // max(n_units, 1))
    for start in range(0, n_resamples, chunk):
        rows = min(chunk, n_resamples - start)
        draws = rng.integers(0, n_units, size=(rows, n_units))
        flat = draws + (np.arange(rows) * n_units)[:, None]
        yield np.bincount(flat.ravel(), minlength=rows * n_units).reshape(rows, n_units).astype(float)


def bootstrap_ci(
    scores: Sequence[float], n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0
) -> ConfidenceInterval:
    """Percentile-bootstrap interval of the mean of independent scores (one per question), resampling rows."""
    check_bootstrap_args(n_resamples, alpha)
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_ci got no scores; pass one score per example")
    means = np.concatenate([w @ values / values.size for w in resampling_weights(values.size, n_resamples, seed)])
    return ConfidenceInterval(float(values.mean()), *percentile_interval(means, alpha))


class PositionTable(NamedTuple):
    """Per-question score sums and counts at each position: the unit a cluster bootstrap resamples."""

    clusters: list[str]
    positions: list[int]
    sums: np.ndarray  # [clusters, positions]
    counts: np.ndarray  # [clusters, positions]

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], score_key: str = "score") -> PositionTable:
        clusters = sorted({str(r["example_id"]) for r in records})
        positions = sorted({int(r["gold_position"]) for r in records})
        row = {c: i for i, c in enumerate(clusters)}
        col = {p: j for j, p in enumerate(positions)}
        sums = np.zeros((len(clusters), len(positions)))
        counts = np.zeros((len(clusters), len(positions)))
        for r in records:
            i, j = row[str(r["example_id"])], col[int(r["gold_position"])]
            sums[i, j] += float(r[score_key])
            counts[i, j] += 1
        return cls(clusters, positions, sums, counts)


def cluster_bootstrap_curves(table: PositionTable, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Resample questions with replacement; return (overall accuracy [B], accuracy by position [B, P]).

    A position that no drawn question covers is nan in that resample.
    """
    overall, curves = [], []
    for weights in resampling_weights(len(table.clusters), n_resamples, seed):
        sums, counts = weights @ table.sums, weights @ table.counts
        overall.append(sums.sum(axis=1) / counts.sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            curves.append(np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan))
    return np.concatenate(overall), np.concatenate(curves)


class PairedDifferences(NamedTuple):
    """Method − baseline over the records both scored (paired by `id`), per question."""

    clusters: list[str]
    sums: np.ndarray  # sum of the question's paired differences
    counts: np.ndarray  # its number of paired records
    n_pairs: int
    identical: bool  # no paired record differs
    constant: float | None = None  # the one score every paired record has, on both sides (None: they vary)


def paired_differences(
    records: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], score_key: str = "score"
) -> PairedDifferences:
    """Pair records with the baseline's by `id`; per question: sum of differences and number of pairs."""
    reference = {r["id"]: float(r[score_key]) for r in baseline}
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    identical = True
    values: set[float] = set()  # every paired score, both sides: one value = nothing could differ
    for r in records:
        if r["id"] in reference:
            cluster = str(r["example_id"])
            difference = float(r[score_key]) - reference[r["id"]]
            identical = identical and difference == 0
            if len(values) < 2:
                values.update((float(r[score_key]), reference[r["id"]]))
            sums[cluster] = sums.get(cluster, 0.0) + difference
            counts[cluster] = counts.get(cluster, 0) + 1
    clusters = sorted(sums)
    return PairedDifferences(
        clusters,
        np.array([sums[c] for c in clusters]),
        np.array([counts[c] for c in clusters], dtype=float),
        sum(counts.values()),
        identical,
        next(iter(values)) if len(values) == 1 else None,
    )


def cluster_bootstrap_ratio(
    numerators: np.ndarray, denominators: np.ndarray, n_resamples: int, alpha: float, seed: int
) -> ConfidenceInterval:
    """Σ numerators / Σ denominators over questions, with its question-level percentile-bootstrap interval."""
    check_bootstrap_args(n_resamples, alpha)
    ratios = np.concatenate(
        [(w @ numerators) / (w @ denominators) for w in resampling_weights(numerators.size, n_resamples, seed)]
    )
    return ConfidenceInterval(float(numerators.sum() / denominators.sum()), *percentile_interval(ratios, alpha))


def sign_flip_test(
    differences: Sequence[float], n_permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0
) -> SignFlipTest:
    """Two-sided paired sign-flip (permutation) test of H0: method and baseline are exchangeable per question.

    Under H0 each per-question mean difference is as likely to have the opposite sign, so the
    p-value is the share of sign patterns whose |mean| is at least the observed |mean|. With at
    most `EXACT_SIGN_FLIP_MAX` non-zero differences all 2^m patterns are enumerated (exact);
    otherwise `n_permutations` random patterns give p = (1 + hits) / (1 + n_permutations), a
    valid (slightly conservative) p-value. Zero differences do not change under a flip. All
    differences zero: p = 1.
    """
    d = np.asarray(differences, dtype=float)
    nonzero = d[d != 0]
    m = nonzero.size
    if m == 0:
        return SignFlipTest(1.0, True, 1, 0)
    observed = abs(nonzero.sum())
    tolerance = 1e-9 * np.abs(nonzero).sum()  # ties in floating point count as ties
    if m <= EXACT_SIGN_FLIP_MAX:
        hits = 0
        chunk_bits = max(0, m - 16)  # enumerate 2^16 patterns at a time
        low_bits = m - chunk_bits
        low = np.array(list(itertools.product((1.0, -1.0), repeat=low_bits)))  # [2^low, low_bits]
        low_sums = low @ nonzero[:low_bits]
        for high in itertools.product((1.0, -1.0), repeat=chunk_bits):
            total = low_sums + float(np.dot(high, nonzero[low_bits:]))
            hits += int(np.count_nonzero(np.abs(total) >= observed - tolerance))
        return SignFlipTest(hits / 2**m, True, 2**m, m)
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}; 20000 is usual")
    rng = np.random.default_rng(seed)
    chunk = max(1, _MAX_ENTRIES_PER_CHUNK // m)
    hits = 0
    for start in range(0, n_permutations, chunk):
        rows = min(chunk, n_permutations - start)
        signs = rng.integers(0, 2, size=(rows, m)) * 2.0 - 1.0
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= observed - tolerance))
    return SignFlipTest((1 + hits) / (1 + n_permutations), False, n_permutations, m)


def smallest_attainable_p(
    n_questions: int, comparisons: int = 1, n_permutations: int = DEFAULT_PERMUTATIONS
) -> tuple[float, float]:
    """(sign-flip with Holm, exact McNemar): the smallest p each test can give with `n_questions` paired questions.

    The best case of both is every question differing the same way. The exact sign-flip test then finds 2 of the
    2^n sign patterns as extreme (p = 2 / 2^n; a Monte Carlo test, past `EXACT_SIGN_FLIP_MAX`, no less than
    1 / (1 + n_permutations)), and Holm multiplies the smallest of `comparisons` p-values by their number; the
    clustered exact McNemar test is a two-sided binomial over the questions, 2 × 0.5^n (not adjusted). When
    these reach alpha, no verdict of a run this small can be "helps" or "hurts", whatever the method does.
    """
    n = max(int(n_questions), 0)
    sign_flip = 2.0 ** (1 - n) if n <= EXACT_SIGN_FLIP_MAX else 1.0 / (1 + n_permutations)
    return min(1.0, max(comparisons, 1) * sign_flip), min(1.0, 2.0 ** (1 - n))


def holm_adjust(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of p-values of several comparisons against one baseline.

    Controls the family-wise error rate without assuming independence: the i-th smallest p is
    multiplied by (m - i + 1), running maxima keep the order, and values are capped at 1.
    """
    ordered = sorted(p_values.items(), key=lambda item: (item[1], item[0]))
    m = len(ordered)
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[name] = running
    return adjusted


#: The verdicts of a comparison with the baseline (`verdict`); `uninformative(value)` words the degenerate one.
HELPS, HURTS, NO_CHANGE, IDENTICAL = "helps", "hurts", "no measurable change", "identical"
NO_ANSWERS = "no answers"
UNINFORMATIVE = "uninformative"
VERDICTS = (HELPS, HURTS, NO_CHANGE, IDENTICAL, NO_ANSWERS, UNINFORMATIVE)


def uninformative(value: float) -> str:
    """The verdict of a comparison whose every paired score is `value` on both sides, e.g. 'uninformative (every
    score 0)': equal because nothing could differ, not because the method changed nothing."""
    return f"{UNINFORMATIVE} (every score {value:g})"


def verdict(
    low: float | None,
    high: float | None,
    p_holm: float | None,
    identical: bool,
    alpha: float = 0.05,
    *,
    constant: float | None = None,
    no_answers: bool = False,
) -> str:
    """One word for a paired Δ (method − baseline): what a reader may conclude from its interval and test.

    "no answers" when every answer the method generated is empty (whatever its scores: the method is
    broken, not better or worse); "uninformative (every score v)" when every paired prompt scores the
    same v with both (0 on a task the model never gets right: equal scores say nothing about the method);
    "identical" when no paired prompt differs otherwise; "helps" when the whole (1 - alpha) interval of Δ
    lies above 0 and the Holm-adjusted p is below alpha, "hurts" when it lies below 0 with the same p;
    otherwise "no measurable change" (also when the interval or p is undefined). Both conditions are
    asked for because the bootstrap interval and the sign-flip test can disagree near the boundary,
    and p is the adjusted one because a table compares several methods with one baseline.
    """
    if no_answers:
        return NO_ANSWERS
    if constant is not None:
        return uninformative(constant)
    if identical:
        return IDENTICAL
    defined = all(v is not None and math.isfinite(v) for v in (low, high, p_holm))
    if defined and p_holm < alpha:
        if low > 0:
            return HELPS
        if high < 0:
            return HURTS
    return NO_CHANGE


def mean_std_over_seeds(values: Sequence[float]) -> MeanStd:
    """Mean and sample std (ddof=1) of one metric measured under several seeds; std is nan for one seed."""
    if len(values) == 0:
        raise ValueError("mean_std_over_seeds got no values; pass one metric value per seed")
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    return MeanStd(float(arr.mean()), std, int(arr.size))
