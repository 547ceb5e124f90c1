"""Smoothness of a per-layer scale vector across layers (lower = smoother).

The LPES paper measures the smoothness S of the scaling factors across layers
(its Eq. 14) to argue that curve-constrained scales beat free per-layer ones.
`smoothness` is this project's stand-in, not checked against Eq. 14: the mean
absolute second difference

    S = 1 / (L − 2) · Σ_{h=1}^{L−2} |s_{h+1} − 2 s_h + s_{h−1}|,

which is 0 for any straight line and grows with roughness. The structure
deviation D (Eq. 12–13) has a stand-in of its own in search/structure.py;
`python -m search diagnose` reports D and S of a scale file and its variants
side by side.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def smoothness(scales: Sequence[float]) -> float:
    """Mean absolute second difference of the scales over layers (lower = smoother; see module docstring)."""
    values = np.asarray(scales, dtype=np.float64)
    if values.ndim != 1 or len(values) < 3:
        raise ValueError(f"smoothness needs >= 3 per-layer scales, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError("smoothness needs finite scales")
    return float(np.mean(np.abs(np.diff(values, n=2))))
