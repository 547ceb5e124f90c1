"""The LPES curves (Bézier, Eq. 3–6 and App. D; linear and step ablations): `repo_train.modeling.scale_curves`.

They live below `search` and `evaluation` because both check scale files with
them; this module keeps the search's name for them.
"""

from repo_train.modeling.scale_curves import (
    CURVES,
    MAX_POINTS,
    MIN_POINTS,
    CurveFunction,
    bernstein_basis,
    bezier_point,
    bezier_scales,
    curve_scales,
    layer_positions,
    linear_scales,
    solve_t,
    step_scales,
)

__all__ = [
    "CURVES",
    "MAX_POINTS",
    "MIN_POINTS",
    "CurveFunction",
    "bernstein_basis",
    "bezier_point",
    "bezier_scales",
    "curve_scales",
    "layer_positions",
    "linear_scales",
    "solve_t",
    "step_scales",
]
