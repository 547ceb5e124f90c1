"""Synthetic REPO positions with known chunk patterns, shared by the statistics and plot tests."""

from __future__ import annotations

import torch


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
