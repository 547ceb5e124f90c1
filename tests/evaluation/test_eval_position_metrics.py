"""Accuracy-by-position summaries and curve shapes on synthetic data (uncertainty: test_eval_statistics.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.position_metrics import (
    accuracy_by_position,
    classify_shape,
    middle_minus_edges_gap,
    middle_minus_edges_rows,
    summarize_positions,
    u_shape_rho,
    u_shape_rho_rows,
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


def test_row_versions_equal_the_scalar_ones() -> None:
    rng = np.random.default_rng(0)
    curves = rng.random((5, 8))
    positions = [0, 9, 18, 27, 36, 45, 54, 63]
    rows = u_shape_rho_rows(curves, positions, 64)
    gaps = middle_minus_edges_rows(curves)
    for i, curve in enumerate(curves):
        assert rows[i] == pytest.approx(u_shape_rho(positions, list(curve), 64), rel=1e-9)
        assert gaps[i] == pytest.approx(middle_minus_edges_gap(dict(zip(positions, curve))), rel=1e-9)
    assert math.isnan(u_shape_rho_rows(np.full((1, 8), 0.7), positions, 64)[0])  # flat: undefined


def _intervals(accuracies, half_width=0.05):
    return {p: (a - half_width, a + half_width) for p, a in enumerate(accuracies)}


def test_shape_words_follow_the_curve_not_rho() -> None:
    # the ramp: 0.05-0.23 at positions 0-5, then 0.70, 0.93 -- rho is large, yet it is no U
    ramp = [0.05, 0.08, 0.12, 0.15, 0.20, 0.23, 0.70, 0.93]
    assert u_shape_rho(list(range(8)), ramp, 8) > 0
    assert classify_shape(_intervals(ramp)) == "ramp up"
    assert classify_shape(_intervals(ramp[::-1])) == "ramp down"
    assert classify_shape(_intervals([1.0, 0.5, 0.55, 0.6, 0.5, 1.0])) == "U"
    assert classify_shape(_intervals([0.9, 0.5, 0.5, 0.7])) == "U"  # lower at the last edge, still a lost middle
    assert classify_shape(_intervals([0.3, 0.9, 0.9, 0.3])) == "other"  # inverted U
    assert classify_shape(_intervals([0.9, 0.2, 0.9, 0.2, 0.9])) == "U"
    assert classify_shape(_intervals([0.5, 0.9, 0.5, 0.1])) == "other"  # falls to the end but peaks above the start
    # flat: identical values, or differences smaller than the intervals
    assert classify_shape(_intervals([1.0] * 8, 0.0)) == "flat"
    assert classify_shape(_intervals([0.50, 0.55, 0.45, 0.52])) == "flat"
    assert classify_shape({0: (0.4, 0.6)}) is None
