"""The training objective: next-token cross-entropy plus OLMo's z-loss.

z-loss (PaLM's "auxiliary softmax loss", used by OLMo with multiplier 1e-5)
penalises log Z = logsumexp(logits) squared, keeping the softmax normaliser
near 1 so logits do not drift in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass
class LossParts:
    total: torch.Tensor
    ce: torch.Tensor
    z: torch.Tensor
    tokens: int


def shift_labels(input_ids: torch.Tensor, pad_token_id: int | None = None) -> torch.Tensor:
    """Labels for next-token prediction: ids shifted left, last position and padding ignored."""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, :-1] = input_ids[:, 1:]
    if pad_token_id is not None:
        labels[labels == pad_token_id] = IGNORE_INDEX
    return labels


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, z_loss_multiplier: float = 1e-5) -> LossParts:
    """Mean cross-entropy and z-loss over the positions whose label is not ignored.

    `logits [B, S, V]` are aligned with `labels [B, S]` (labels already shifted).
    Computed in float32 whatever the logits' dtype.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_labels = labels.reshape(-1)
    keep = flat_labels != IGNORE_INDEX
    tokens = int(keep.sum())
    if tokens == 0:
        raise ValueError("a batch has no target tokens (every label is padding or ignored)")
    ce = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE_INDEX, reduction="sum") / tokens
    log_z = torch.logsumexp(flat_logits[keep], dim=-1)
    z = z_loss_multiplier * log_z.pow(2).mean()
    return LossParts(total=ce + z, ce=ce.detach(), z=z.detach(), tokens=tokens)
