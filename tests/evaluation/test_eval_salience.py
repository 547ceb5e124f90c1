"""Salience S(L): the mean reciprocal rank of the gold token (PCD, Eq. 1)."""

from __future__ import annotations

import math

import pytest
import torch

from evaluation.salience import salience_score


def test_salience_is_mean_reciprocal_rank():
    logits = torch.tensor([[0.1, 0.9, 0.5, 0.3], [2.0, 1.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    gold = torch.tensor([1, 1, 2])  # ranks 1, 3 and 1 (ties count for the gold token)
    assert salience_score(logits, gold) == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert salience_score(logits[None], gold[None]) == pytest.approx((1 + 1 / 3 + 1) / 3)  # any leading dims
    with pytest.raises(ValueError, match="do not match"):
        salience_score(logits, gold[:2])
    with pytest.raises(ValueError, match=r"must lie in \[0, 3\]"):
        salience_score(logits, torch.tensor([0, 1, 7]))


def test_salience_score_is_the_mean_reciprocal_rank_of_the_gold_token():
    logits = torch.tensor([[1.0, 5.0, 3.0], [0.0, 0.0, 9.0], [2.0, 2.0, 1.0]])
    # gold 2 -> one better token (rank 2); gold 2 -> rank 1; gold 0 -> a tie is not "better" -> rank 1
    assert salience_score(logits, [2, 2, 0]) == pytest.approx((1 / 2 + 1 + 1) / 3)
    assert salience_score(torch.tensor([[0.0, -math.inf, 1.0]]), [1]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="logits"):
        salience_score(logits, [0, 1])
