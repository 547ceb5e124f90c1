"""Attention mass on the needle, the query and the rest, per token and in total."""

from __future__ import annotations

import pytest
import torch

from evaluation.attention_mass import attention_mass, attention_mass_by_layer, last_query_rows


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
