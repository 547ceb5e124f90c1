"""The prior of PositionalHidden's search: which hidden-state channels change monotonically and smoothly with position.

Input: the hidden states averaged over texts, shape (entries, positions, channels), one entry per element of
transformers' `output_hidden_states` (the embeddings, then each layer's output). Following the authors'
experiments/search_dimension/seach_dim_by_statistic.py (commit f3bcd5560c2b080233e9f12ae60b8c42880faf97):

- with an odd number of entries the first (the embeddings) is dropped;
- a channel's curve in one entry is cut at `mono_skip`, scaled to [0, 1] and fitted by a cubic; the entry counts
  as increasing (decreasing) when the fit's steps are all >= 0 (<= 0). Entries 2 .. n-2 are looked at; a
  channel's monotone entries are its increasing ones if they outnumber the decreasing ones, else the decreasing;
- candidates: channels monotone in more than n // 4 entries;
- a candidate's smoothness: in each of its monotone entries, the curve cut at `smooth_skip`, scaled to [0, 1],
  smoothed by a Savitzky-Golay filter (window 10, cubic), then the sum of its squared second differences; the
  least over those entries. The `topk` smoothest candidates are returned, smoothest first.

One difference, for flat curves only: a channel constant over the kept positions (which the authors' scaling
to [0, 1] would divide by zero) counts as not monotone here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import savgol_filter

DEGREE = 3
WINDOW = 10


@dataclass
class ChannelStatistic:
    """One candidate channel: its monotone entries (indices after the embeddings are dropped), its direction and
    its smoothness (lower is smoother)."""

    dim: int
    layers: list[int]
    direction: str
    smoothness: float

    def to_dict(self) -> dict:
        return {
            "dim": self.dim,
            "monotone_layers": self.layers,
            "direction": self.direction,
            "smoothness": self.smoothness,
        }


def _scaled(curve: np.ndarray) -> np.ndarray | None:
    low, high = float(np.min(curve)), float(np.max(curve))
    if not high > low:
        return None
    return (curve - low) / (high - low)


def monotone_direction(curve: np.ndarray, skip: int) -> int:
    """+1 if the cubic fit of `curve[skip:]` (scaled to [0, 1]) never falls, -1 if it never rises, else 0."""
    data = _scaled(curve[skip:])
    if data is None:
        return 0
    x = np.arange(len(data), dtype=np.float32)
    steps = np.diff(np.poly1d(np.polyfit(x, data.astype(np.float32), DEGREE))(x))
    if np.all(steps >= 0):
        return 1
    if np.all(steps <= 0):
        return -1
    return 0


def monotone_layers(curves: np.ndarray, skip: int) -> tuple[list[int], str]:
    """The entries (of `curves`, shape (entries, positions)) where one channel is monotone, and the direction."""
    rising, falling = [], []
    for layer in range(2, curves.shape[0] - 1):
        direction = monotone_direction(curves[layer], skip)
        if direction > 0:
            rising.append(layer)
        elif direction < 0:
            falling.append(layer)
    return (rising, "increasing") if len(rising) > len(falling) else (falling, "decreasing")


def smoothness(curve: np.ndarray) -> float:
    """Sum of squared second differences of the curve scaled to [0, 1] and Savitzky-Golay smoothed."""
    data = _scaled(curve)
    if data is None:
        return 0.0
    smoothed = savgol_filter(data, window_length=WINDOW, polyorder=DEGREE, axis=0)
    return float(np.sum(np.square(np.diff(smoothed, n=2))))


def candidate_channels(hidden: np.ndarray, topk: int, mono_skip: int = 300, smooth_skip: int = 200):
    """The `topk` smoothest channels monotone in more than a quarter of the entries (`ChannelStatistic`s), and
    the number of entries looked at. `hidden`: (entries, positions, channels), averaged over texts."""
    hidden = np.asarray(hidden, dtype=np.float32)
    if hidden.ndim != 3:
        raise ValueError(f"hidden states of shape {hidden.shape}: expected (entries, positions, channels)")
    if hidden.shape[0] % 2 == 1:  # the embeddings, as the authors drop them
        hidden = hidden[1:]
    entries = hidden.shape[0]
    found = []
    for dim in range(hidden.shape[2]):
        layers, direction = monotone_layers(hidden[:, :, dim], mono_skip)
        if len(layers) > entries // 4:
            least = min(smoothness(hidden[layer, smooth_skip:, dim]) for layer in layers)
            found.append(ChannelStatistic(dim, layers, direction, least))
    found.sort(key=lambda item: item.smoothness)  # stable: equal values keep the channel order
    return found[:topk], entries
