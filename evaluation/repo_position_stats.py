"""Statistics of the positions REPO layers assign (REPO §5.2): range per head and chunk patterns.

Input is `repo_train.modeling.record_positions` output (per layer `[B, H, S]`,
None for NoPE layers): per head, the range max z - min z over the tokens (mean
over the batch), and the share of 16-token chunks that are constant, monotonic
or hybrid. The rule, applied per chunk (consecutive, non-overlapping windows
from token 0; a trailing partial chunk is dropped) in this order:
  constant  -- every z in the chunk is within ±0.2 of the chunk's mean;
  monotonic -- else, consecutive differences are all >= 0 or all <= 0;
  hybrid    -- otherwise.
Shares are over all chunks of all sequences in the batch. (The paper names the
three patterns; the thresholds above are this project's, stated so that numbers
can be reproduced.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

CHUNK = 16
CONSTANT_TOLERANCE = 0.2
PATTERNS = ("constant", "monotonic", "hybrid")


def chunk_patterns(positions: torch.Tensor, chunk: int = CHUNK, tolerance: float = CONSTANT_TOLERANCE) -> torch.Tensor:
    """Pattern code of each chunk of positions [..., S] -> [..., S // chunk]: 0 constant, 1 monotonic, 2 hybrid."""
    if chunk < 2:
        raise ValueError(f"chunk must be >= 2 tokens, got {chunk}")
    seq = positions.shape[-1]
    if seq < chunk:
        raise ValueError(f"{seq} tokens make no full chunk of {chunk}; record positions of a longer input")
    z = positions.double()[..., : seq - seq % chunk].unflatten(-1, (seq // chunk, chunk))
    constant = (z - z.mean(-1, keepdim=True)).abs().amax(-1) <= tolerance
    steps = z.diff(dim=-1)
    monotonic = (steps >= 0).all(-1) | (steps <= 0).all(-1)
    codes = torch.full(constant.shape, 2, dtype=torch.long)
    codes[monotonic] = 1
    codes[constant] = 0
    return codes


@dataclass(frozen=True)
class HeadPositionStats:
    """One layer's REPO position statistics per head: range and the share of each chunk pattern."""

    range: torch.Tensor
    constant: torch.Tensor
    monotonic: torch.Tensor
    hybrid: torch.Tensor
    num_chunks: int


def head_position_stats(
    positions: torch.Tensor, chunk: int = CHUNK, tolerance: float = CONSTANT_TOLERANCE
) -> HeadPositionStats:
    """Statistics of one layer's positions [B, H, S] (or [H, S]); every tensor field is [H]."""
    if positions.dim() == 2:
        positions = positions.unsqueeze(0)
    if positions.dim() != 3:
        raise ValueError(f"expected one layer's positions [B, H, S] or [H, S], got shape {tuple(positions.shape)}")
    z = positions.double()
    spread = (z.amax(-1) - z.amin(-1)).mean(0)
    codes = chunk_patterns(z, chunk, tolerance)  # [B, H, C]
    shares = [(codes == code).double().mean(dim=(0, 2)) for code in range(3)]
    return HeadPositionStats(spread, *shares, num_chunks=codes.shape[0] * codes.shape[2])


def position_statistics(
    recorded: Sequence[torch.Tensor | None], chunk: int = CHUNK, tolerance: float = CONSTANT_TOLERANCE
) -> list[HeadPositionStats | None]:
    """`head_position_stats` of every layer of a `record_positions(...).positions` list (None stays None)."""
    return [None if p is None else head_position_stats(p, chunk, tolerance) for p in recorded]
