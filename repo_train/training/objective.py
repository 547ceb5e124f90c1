"""The training objective: next-token cross-entropy plus OLMo's z-loss.

z-loss (PaLM's "auxiliary softmax loss", used by OLMo with multiplier 1e-5)
penalises log Z = logsumexp(logits) squared, keeping the softmax normaliser
near 1 so logits do not drift in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

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


def _targets(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The flat labels, the mask of positions that carry a loss, and their count (refused when 0)."""
    flat_labels = labels.reshape(-1)
    keep = flat_labels != IGNORE_INDEX
    tokens = int(keep.sum())
    if tokens == 0:
        raise ValueError("a batch has no target tokens (every label is padding or ignored)")
    return flat_labels, keep, tokens


def _summed_terms(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy and summed (log Z)^2 of float32 `logits [N, V]` whose `labels [N]` are all kept."""
    ce = F.cross_entropy(logits, labels, reduction="sum")
    log_z = torch.logsumexp(logits, dim=-1)
    return ce, log_z.pow(2).sum()


def _parts(ce_sum: torch.Tensor, log_z_sq_sum: torch.Tensor, tokens: int, z_loss_multiplier: float) -> LossParts:
    ce = ce_sum / tokens
    z = z_loss_multiplier * (log_z_sq_sum / tokens)
    return LossParts(total=ce + z, ce=ce.detach(), z=z.detach(), tokens=tokens)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, z_loss_multiplier: float = 1e-5) -> LossParts:
    """Mean cross-entropy and z-loss over the positions whose label is not ignored.

    `logits [B, S, V]` are aligned with `labels [B, S]` (labels already shifted).
    Computed in float32 whatever the logits' dtype.
    """
    flat_labels, keep, tokens = _targets(labels)
    kept_logits = logits.reshape(-1, logits.shape[-1])[keep].float()
    return _parts(*_summed_terms(kept_logits, flat_labels[keep]), tokens, z_loss_multiplier)


def check_loss_chunk_tokens(chunk_tokens) -> None:
    """`model.loss_chunk_tokens` is a whole number >= 0 (0 = no chunks)."""
    if isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 0:
        raise ValueError(
            f"model.loss_chunk_tokens must be a whole number >= 0, got {chunk_tokens!r}: give the tokens per chunk "
            "of the loss (e.g. 4096), or 0 to compute the loss of the whole micro batch at once"
        )


def _chunk_sums(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _summed_terms(head(hidden).float(), labels)


def chunked_lm_loss(
    hidden: torch.Tensor,
    head: nn.Module,
    labels: torch.Tensor,
    chunk_tokens: int,
    z_loss_multiplier: float = 1e-5,
) -> LossParts:
    """`lm_loss(head(hidden), labels)` without ever holding the logits of the whole batch.

    `hidden [B, S, H]` are the decoder's final hidden states (what a causal LM
    feeds its `head`). The positions that carry a loss are taken in chunks of
    `chunk_tokens`; each chunk's logits are made, reduced to its summed
    cross-entropy and (log Z)^2 in float32, and dropped: the chunk runs under
    non-reentrant activation checkpointing, so backward recomputes its logits
    (one more `head` matmul per token) instead of keeping [tokens, vocab]
    tensors alive. Same value as `lm_loss` up to float rounding (the sums are
    added chunk by chunk).
    """
    check_loss_chunk_tokens(chunk_tokens)
    if chunk_tokens == 0:
        raise ValueError("chunked_lm_loss needs chunk_tokens >= 1 (0 means lm_loss on the full logits)")
    flat_labels, keep, tokens = _targets(labels)
    kept_hidden = hidden.reshape(-1, hidden.shape[-1])[keep]
    kept_labels = flat_labels[keep]
    ce_sum = log_z_sq_sum = None
    for start in range(0, tokens, chunk_tokens):
        stop = min(start + chunk_tokens, tokens)
        ce, log_z_sq = checkpoint(
            _chunk_sums, head, kept_hidden[start:stop], kept_labels[start:stop], use_reentrant=False
        )
        ce_sum = ce if ce_sum is None else ce_sum + ce
        log_z_sq_sum = log_z_sq if log_z_sq_sum is None else log_z_sq_sum + log_z_sq
    return _parts(ce_sum, log_z_sq_sum, tokens, z_loss_multiplier)
