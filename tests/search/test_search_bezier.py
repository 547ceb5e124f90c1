"""Bézier curve (Eq. 3–6), t(x) by bisection (App. D), and the linear / step ablation curves."""

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.methods.lpes.curves import (
    CURVES,
    bernstein_basis,
    bezier_point,
    bezier_scales,
    curve_scales,
    layer_positions,
    linear_scales,
    solve_t,
    step_scales,
)


@st.composite
def control_points(draw):
    """Random valid control points: 2–5 strictly increasing integer x in [0, L−1], y on the 0.1 grid."""
    num_layers = draw(st.integers(8, 48))
    count = draw(st.integers(2, 5))
    xs = sorted(draw(st.sets(st.integers(0, num_layers - 1), min_size=count, max_size=count)))
    ys = [y / 10 for y in draw(st.lists(st.integers(10, 20), min_size=count, max_size=count))]
    return xs, ys, num_layers


def test_bernstein_matches_the_written_out_formula():
    t = np.array([0.0, 0.3, 0.77, 1.0])
    basis = bernstein_basis(3, t)
    for k in range(4):
        assert np.allclose(basis[:, k], comb(3, k) * t**k * (1 - t) ** (3 - k), rtol=0, atol=1e-15)
    assert np.allclose(basis.sum(axis=1), 1.0)


def test_cubic_bezier_point_by_hand():
    xs, ys, t = [0, 2, 5, 9], [1.0, 2.0, 1.2, 1.6], 0.4
    b = [(1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t**2 * (1 - t), t**3]
    x, y = bezier_point(xs, ys, t)
    assert x == pytest.approx(sum(bi * xi for bi, xi in zip(b, xs)), abs=1e-12)
    assert y == pytest.approx(sum(bi * yi for bi, yi in zip(b, ys)), abs=1e-12)


def test_layer_positions_eq6():
    assert layer_positions(2, 9, 8).tolist() == pytest.approx([2 + h for h in range(8)])
    assert layer_positions(0, 31, 32)[-1] == 31
    with pytest.raises(ValueError, match="at least 2 layers"):
        layer_positions(0, 1, 1)


@settings(max_examples=40, deadline=None)
@given(control_points())
def test_endpoints_are_the_first_and_last_control_points(points):
    xs, ys, num_layers = points
    x, y = bezier_point(xs, ys, np.array([0.0, 1.0]))
    assert x.tolist() == [xs[0], xs[-1]] and y.tolist() == pytest.approx([ys[0], ys[-1]], abs=1e-15)
    for curve in CURVES:
        scales = curve_scales(curve, xs, ys, num_layers)
        assert scales.shape == (num_layers,)
        assert scales[0] == pytest.approx(ys[0], abs=1e-12) and scales[-1] == pytest.approx(ys[-1], abs=1e-12)
        assert min(ys) - 1e-12 <= scales.min() and scales.max() <= max(ys) + 1e-12  # convex hull property


@settings(max_examples=40, deadline=None)
@given(control_points(), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=20))
def test_t_of_x_inverts_x_of_t(points, fractions):
    xs, ys, _ = points
    targets = np.array([xs[0] + f * (xs[-1] - xs[0]) for f in fractions])
    t = solve_t(xs, targets)
    x, _ = bezier_point(xs, ys, t)
    assert np.all((0 <= t) & (t <= 1))
    assert np.max(np.abs(x - targets)) < 1e-9


def test_flat_control_points_give_a_flat_curve():
    for curve in CURVES:
        assert curve_scales(curve, [0, 3, 9, 20], [1.7] * 4, 21).tolist() == [1.7] * 21


def test_monotone_control_y_gives_monotone_bezier():
    scales = bezier_scales([0, 4, 7, 15], [1.0, 1.3, 1.6, 2.0], 16)
    assert np.all(np.diff(scales) > 0)


def test_linear_curve_passes_through_control_points():
    scales = linear_scales([0, 4, 8], [1.0, 2.0, 1.2], 9)
    assert scales.tolist() == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0, 1.8, 1.6, 1.4, 1.2])


def test_step_curve_takes_the_nearest_control_point_to_the_left():
    scales = step_scales([0, 3, 6], [1.1, 1.5, 1.9], 7)
    assert scales.tolist() == [1.1, 1.1, 1.1, 1.5, 1.5, 1.5, 1.9]
    # Eq. 6 positions are fractional here: x_h = 1.5 h for 3 layers over [0, 3].
    assert step_scales([0, 1, 3], [1.0, 1.4, 2.0], 3).tolist() == [1.0, 1.4, 2.0]


@pytest.mark.parametrize(
    ("xs", "ys", "message"),
    [
        ([0, 3, 3], [1, 1, 1], "strictly increasing"),
        ([0], [1], "2–5 control points"),
        ([0, 1, 2, 3, 4, 5], [1] * 6, "2–5 control points"),
        ([0, 1], [1, 1, 1], "equal length"),
    ],
)
def test_invalid_control_points_are_clear_errors(xs, ys, message):
    with pytest.raises(ValueError, match=message):
        bezier_scales(xs, ys, 8)


def test_unknown_curve_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown curve type 'spline'; choose one of \['bezier', 'linear', 'step'\]"):
        curve_scales("spline", [0, 1], [1, 1], 4)
