"""Smoothness of a scale vector (mean absolute second difference; see search/smoothness.py)."""

import pytest

from search.genome import CurveGenome, SearchSpace
from search.smoothness import smoothness


def test_straight_lines_are_perfectly_smooth():
    assert smoothness([1.5] * 8) == 0.0
    assert smoothness([1.0, 1.25, 1.5, 1.75, 2.0]) == pytest.approx(0.0, abs=1e-15)


def test_value_by_hand():
    # second differences: (2 - 2 + 1) = 1, (1 - 4 + 1) = -2  ->  mean |.| = 1.5
    assert smoothness([1.0, 1.0, 2.0, 1.0]) == pytest.approx((abs(1.0) + abs(-2.0)) / 2)


def test_bezier_scales_are_smoother_than_a_zigzag_of_the_same_range():
    space = SearchSpace(16)
    curve = space.scales(CurveGenome((0, 5, 10, 15), (10, 20, 10, 20)))
    zigzag = [1.0 if h % 2 else 2.0 for h in range(16)]
    assert smoothness(curve) < smoothness(zigzag) / 10


def test_errors():
    with pytest.raises(ValueError, match=">= 3 per-layer scales"):
        smoothness([1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        smoothness([1.0, float("inf"), 2.0])
