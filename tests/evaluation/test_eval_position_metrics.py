"""Accuracy-by-position summaries and bootstrap uncertainty on synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.position_metrics import (
    accuracy_by_position,
    bootstrap_ci,
    mean_std_over_seeds,
    middle_minus_edges_gap,
    paired_bootstrap,
    summarize_positions,
    u_shape_rho,
    worst_position_accuracy,
)


def test_accuracy_by_position() -> None:
    records = [
        {"gold_position": 4, "score": 1.0},
        {"gold_position": 0, "score": 1.0},
        {"gold_position": 4, "score": 0.0},
        {"gold_position": 0, "score": 1.0},
        {"gold_position": 9, "score": 0.0},
    ]
    result = accuracy_by_position(records)
    assert result == {0: 1.0, 4: 0.5, 9: 0.0}
    assert list(result) == [0, 4, 9]
    assert accuracy_by_position([{"gold_position": 2, "em": 0.25}], score_key="em") == {2: 0.25}
    with pytest.raises(ValueError, match=r"each record needs 'gold_position' and 'score'"):
        accuracy_by_position([{"gold_position": 0}])
    with pytest.raises(ValueError, match=r"got no records"):
        accuracy_by_position([])


def test_rho_hand_computed() -> None:
    # k=5 -> T=4: positions 0, 2, 4 have delta 1, 0, 1. Pearson([1,0,1], [1,0,0.5]) = 0.5 / sqrt(2/3 * 1/2) = sqrt(3)/2
    assert u_shape_rho([0, 2, 4], [1.0, 0.0, 0.5], 5) == pytest.approx(100 * math.sqrt(3) / 2)
    # accuracy linear in delta: exactly 100
    assert u_shape_rho([0, 1, 2, 3, 4], [0.9, 0.7, 0.5, 0.7, 0.9], 5) == pytest.approx(100.0)


def test_rho_shapes() -> None:
    k = 20
    positions = list(range(k))
    u_curve = [0.5 + 0.4 * ((p - 9.5) / 9.5) ** 2 + 0.01 * (p % 3) for p in positions]
    inverted = [1.0 - a for a in u_curve]
    assert u_shape_rho(positions, u_curve, k) > 90
    assert u_shape_rho(positions, inverted, k) < -90
    assert math.isnan(u_shape_rho(positions, [0.6] * k, k))  # flat accuracy
    assert math.isnan(u_shape_rho([3], [0.6], k))  # one position
    # first and last index both get delta = 1 (T = k - 1), so they alone give a constant delta
    assert math.isnan(u_shape_rho([0, k - 1], [0.2, 0.9], k))
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 19\]"):
        u_shape_rho([0, 20], [0.1, 0.2], k)
    with pytest.raises(ValueError, match=r"2 positions but 3 accuracies"):
        u_shape_rho([0, 1], [0.1, 0.2, 0.3], k)


def test_worst_and_gap() -> None:
    acc = {0: 0.8, 5: 0.4, 10: 0.5, 19: 0.9}
    assert worst_position_accuracy(acc) == 0.4
    assert middle_minus_edges_gap(acc) == pytest.approx(0.45 - 0.85)
    assert math.isnan(middle_minus_edges_gap({0: 0.8, 19: 0.9}))
    summary = summarize_positions(acc, 20)
    assert summary["mean_accuracy"] == pytest.approx(0.65)
    assert summary["worst_accuracy"] == 0.4
    assert summary["rho"] == pytest.approx(u_shape_rho([0, 5, 10, 19], [0.8, 0.4, 0.5, 0.9], 20))
    assert summary["rho"] > 50  # edges better than the middle
    assert summary["middle_minus_edges"] == pytest.approx(-0.4)
    with pytest.raises(ValueError, match=r"got no positions"):
        worst_position_accuracy({})


def test_mean_std_over_seeds() -> None:
    result = mean_std_over_seeds([0.5, 0.6, 0.7])
    assert result.mean == pytest.approx(0.6)
    assert result.std == pytest.approx(0.1)
    assert result.n == 3
    assert math.isnan(mean_std_over_seeds([0.5]).std)
    with pytest.raises(ValueError, match=r"got no values"):
        mean_std_over_seeds([])


def test_bootstrap_ci_contains_mean_and_narrows() -> None:
    rng = np.random.default_rng(1)
    small = (rng.random(50) < 0.6).astype(float)
    large = (rng.random(5000) < 0.6).astype(float)
    ci_small = bootstrap_ci(small)
    ci_large = bootstrap_ci(large)
    for ci, scores in ((ci_small, small), (ci_large, large)):
        assert ci.mean == pytest.approx(scores.mean())
        assert ci.low < ci.mean < ci.high
    assert ci_large.high - ci_large.low < (ci_small.high - ci_small.low) / 4  # ~1/sqrt(100) of the width
    assert bootstrap_ci(small, seed=3) == bootstrap_ci(small, seed=3)
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        bootstrap_ci(small, alpha=1.5)
    with pytest.raises(ValueError, match=r"n_resamples must be >= 1"):
        bootstrap_ci(small, n_resamples=0)


def test_paired_bootstrap_detects_improvement() -> None:
    rng = np.random.default_rng(2)
    baseline = (rng.random(400) < 0.5).astype(float)
    method = baseline.copy()
    flipped = rng.choice(np.flatnonzero(baseline == 0), size=60, replace=False)
    method[flipped] = 1.0  # the method fixes 60 of the baseline's errors, breaks nothing
    result = paired_bootstrap(method, baseline)
    assert result.mean_diff == pytest.approx(60 / 400)
    assert 0 < result.low < result.mean_diff < result.high
    assert result.p_value == 0.0
    same = paired_bootstrap(baseline, baseline)
    assert same.mean_diff == 0.0 and same.p_value == 1.0  # never better than itself
    with pytest.raises(ValueError, match=r"equal-length 1-D score lists"):
        paired_bootstrap([1.0, 0.0], [1.0])
