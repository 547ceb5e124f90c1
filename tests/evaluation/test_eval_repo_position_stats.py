"""REPO position statistics: range per head and the share of constant / monotonic / hybrid chunks."""

from __future__ import annotations

import pytest
import torch
from repo_positions_fixture import synthetic_positions

from evaluation.repo_position_stats import chunk_patterns, head_position_stats, position_statistics


def test_position_statistics_on_known_patterns():
    positions = synthetic_positions()
    codes = chunk_patterns(positions)
    assert codes.tolist() == [[[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 2]]]
    stats = head_position_stats(positions)
    assert stats.constant.tolist() == [1.0, 0.0, 0.25]
    assert stats.monotonic.tolist() == [0.0, 1.0, 0.5]
    assert stats.hybrid.tolist() == [0.0, 0.0, 0.25]
    assert stats.num_chunks == 4
    assert stats.range[1].item() == 63.0
    assert stats.range[2].item() == pytest.approx(float(positions[0, 2].max() - positions[0, 2].min()))
    # a trailing partial chunk is dropped; a step of 0.5 breaks "constant" but stays monotonic
    assert chunk_patterns(torch.arange(20.0) * 0.02).tolist() == [0]  # max deviation 0.15
    assert chunk_patterns(torch.arange(16.0) * 0.03).tolist() == [1]  # max deviation 0.225
    assert chunk_patterns(torch.cat([torch.zeros(8), torch.full((8,), 0.5)])).tolist() == [1]
    layers = position_statistics([None, positions, positions[0]])
    assert layers[0] is None and layers[1].hybrid.tolist() == layers[2].hybrid.tolist()
    with pytest.raises(ValueError, match="no full chunk of 16"):
        chunk_patterns(torch.zeros(1, 2, 10))
    with pytest.raises(ValueError, match=r"\[B, H, S\] or \[H, S\]"):
        head_position_stats(torch.zeros(64))
