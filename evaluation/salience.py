"""Salience S(L) of the PCD paper (Eq. 1): how highly a model ranks the gold token, as plain tensor math.

S(L) = mean over the scored positions of 1 / rank of the gold token in the
logits, with rank = 1 + the number of vocabulary entries with a strictly larger
logit, so ties count in the gold token's favour and excluded tokens (-inf) rank
below every kept one. `evaluation.methods.pcd.pcd_salience` reports it with and
without PCD.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def salience_score(logits: torch.Tensor, gold: torch.Tensor | Sequence[int]) -> float:
    """Mean reciprocal rank of the gold token ids `gold` [...] in `logits` [..., V] (PCD's S(L))."""
    gold = torch.as_tensor(gold, device=logits.device, dtype=torch.long)
    if logits.shape[:-1] != gold.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and gold ids {tuple(gold.shape)} do not match: pass logits [..., V] "
            "and one gold token id per position [...]"
        )
    if gold.numel() == 0:
        raise ValueError("salience_score got no positions to score")
    vocab = logits.shape[-1]
    if gold.min() < 0 or gold.max() >= vocab:
        raise ValueError(f"gold token ids must lie in [0, {vocab - 1}] (the vocabulary of the logits)")
    logits = logits.float()
    gold_logit = logits.gather(-1, gold.long().unsqueeze(-1))
    rank = 1 + (logits > gold_logit).sum(dim=-1)
    return float((1.0 / rank.double()).mean())
