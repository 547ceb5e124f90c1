"""Diagnostics: salience (MRR of the gold token), attention mass by region, REPO position statistics, plot."""

from __future__ import annotations

import pytest
import torch

from evaluation.diagnostics import (
    attention_mass,
    attention_mass_by_layer,
    chunk_patterns,
    head_position_stats,
    last_query_rows,
    plot_head_positions,
    position_statistics,
    salience_score,
)


def test_salience_is_mean_reciprocal_rank():
    logits = torch.tensor([[0.1, 0.9, 0.5, 0.3], [2.0, 1.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    gold = torch.tensor([1, 1, 2])  # ranks 1, 3 and 1 (ties count for the gold token)
    assert salience_score(logits, gold) == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert salience_score(logits[None], gold[None]) == pytest.approx((1 + 1 / 3 + 1) / 3)  # any leading dims
    with pytest.raises(ValueError, match="do not match"):
        salience_score(logits, gold[:2])
    with pytest.raises(ValueError, match=r"must lie in \[0, 3\]"):
        salience_score(logits, torch.tensor([0, 1, 7]))


def test_attention_mass_by_region():
    # 6 keys: needle = keys 1-2, query = key 5, rest = keys 0, 3, 4
    rows = torch.tensor([[0.1, 0.3, 0.3, 0.1, 0.0, 0.2], [0.4, 0.1, 0.1, 0.1, 0.1, 0.2]])
    mass = attention_mass(rows, (1, 3), (5, 6))
    assert mass.needle_total == pytest.approx((0.6 + 0.2) / 2) and mass.needle == pytest.approx((0.3 + 0.1) / 2)
    assert mass.query_total == pytest.approx(0.2) and mass.query == pytest.approx(0.2)
    assert mass.rest_total == pytest.approx((0.2 + 0.6) / 2) and mass.rest == pytest.approx((0.2 / 3 + 0.6 / 3) / 2)
    # padding (key 0 weight 0) left out of "rest": 2 rest tokens instead of 3
    padded = torch.tensor([[0.0, 0.3, 0.3, 0.1, 0.1, 0.2]])
    masked = attention_mass(padded, [(1, 2), (2, 3)], (5, 6), key_mask=torch.tensor([0, 1, 1, 1, 1, 1]))
    assert masked.rest == pytest.approx(0.2 / 2) and masked.needle == pytest.approx(0.3)
    matrix = torch.softmax(torch.randn(2, 3, 5, 5), dim=-1)  # [layers, heads, Q, K]
    per_layer = attention_mass_by_layer(list(last_query_rows(matrix)) + [None], (0, 2), (4, 5))
    assert sorted(per_layer) == [0, 1]
    expected = matrix[0, :, -1, :2].sum(-1).mean()
    assert per_layer[0].needle_total == pytest.approx(float(expected), abs=1e-6)


def test_attention_mass_errors():
    rows = torch.full((1, 4), 0.25)
    with pytest.raises(ValueError, match="must be probabilities"):
        attention_mass(torch.ones(1, 4), (0, 1), (3, 4))
    with pytest.raises(ValueError, match="overlap"):
        attention_mass(rows, (0, 2), (1, 3))
    with pytest.raises(ValueError, match="outside the 4 keys"):
        attention_mass(rows, (0, 9), (3, 4))


def synthetic_positions() -> torch.Tensor:
    """[1, 3, 64] positions: 4 chunks of 16 per head, with known patterns."""
    t = torch.arange(16, dtype=torch.float64)
    flat = torch.full((16,), 7.0) + 0.15 * torch.sin(t)  # within ±0.2 of its mean: constant
    rising, falling = 3.0 * t, -0.5 * t + 2  # monotonic
    zigzag = (t % 2) * 2.0  # neither
    head0 = torch.cat([flat, flat, flat, flat])  # 4/4 constant
    head1 = torch.arange(64, dtype=torch.float64)  # 4/4 monotonic (linear, like RoPE)
    head2 = torch.cat([flat, rising, falling, zigzag])  # 1 constant, 2 monotonic, 1 hybrid
    return torch.stack([head0, head1, head2])[None]


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


def test_plot_head_positions(tmp_path):
    path = tmp_path / "positions.png"
    fig = plot_head_positions(synthetic_positions(), title="layer 3", path=path)
    assert path.stat().st_size > 0 and len([ax for ax in fig.axes if ax.get_visible()]) == 3
    with pytest.raises(ValueError, match=r"heads \[5\] are not in 0..2"):
        plot_head_positions(synthetic_positions(), heads=[5])
    detailed = plot_head_positions(synthetic_positions(), detail_tokens=8)  # a second row, on each head's own scale
    visible = [ax for ax in detailed.axes if ax.get_visible()]
    assert len(visible) == 6 and all(len(ax.lines[0].get_xdata()) == 8 for ax in visible[3:])
