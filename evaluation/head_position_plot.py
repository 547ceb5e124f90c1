"""The figure of positions per head against token index, in the style of the REPO paper's position figures.

Linear RoPE positions are drawn dashed for reference; matplotlib is imported
only when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch


def plot_head_positions(
    positions: torch.Tensor,
    heads: Sequence[int] | None = None,
    title: str | None = None,
    path: str | Path | None = None,
    detail_tokens: int | None = None,
):
    """A figure of positions per head (one panel each) against token index; RoPE's i dashed for reference.

    `positions`: one layer's [H, S] or [B, H, S] (the first sequence is drawn). `detail_tokens`: a second
    row with each head's z alone over the first that many tokens, on its own scale (learned positions that
    span a few units look flat beside RoPE's i). Saved to `path` when given; the `matplotlib.figure.Figure`
    is returned either way (no global backend change).
    """
    from matplotlib.figure import Figure  # heavy: matplotlib stays out of start-up

    if positions.dim() == 3:
        positions = positions[0]
    if positions.dim() != 2:
        raise ValueError(f"expected positions [H, S] or [B, H, S], got shape {tuple(positions.shape)}")
    z = positions.detach().double().cpu()
    heads = list(range(z.shape[0])) if heads is None else list(heads)
    bad = [h for h in heads if not 0 <= h < z.shape[0]]
    if bad or not heads:
        raise ValueError(f"heads {bad or heads} are not in 0..{z.shape[0] - 1}")
    if detail_tokens is not None and detail_tokens < 2:
        raise ValueError(f"detail_tokens must be >= 2, got {detail_tokens}")
    cols = min(4, len(heads))
    rows = -(-len(heads) // cols)
    detail_rows = rows if detail_tokens else 0
    fig = Figure(figsize=(3.2 * cols, 2.4 * (rows + detail_rows)), layout="constrained")
    axes = fig.subplots(rows + detail_rows, cols, squeeze=False)
    index = torch.arange(z.shape[1])
    overview, details = axes[:rows].flat, axes[rows:].flat
    for ax, head in zip(overview, heads):
        ax.plot(index, z[head], lw=1.2, label="learned z")
        ax.plot(index, index, ls="--", lw=0.8, color="grey", label="linear (RoPE)")
        ax.set_title(f"head {head}  (range {float(z[head].max() - z[head].min()):.2f})", fontsize=9)
        ax.set_xlabel("token index")
        ax.set_ylabel("position z")
    if detail_tokens:
        shown = index[:detail_tokens]
        for ax, head in zip(details, heads):
            ax.plot(shown, z[head][:detail_tokens], lw=1.2, marker=".", ms=3)
            ax.set_title(f"head {head}, first {len(shown)} tokens, own scale", fontsize=9)
            ax.set_xlabel("token index")
            ax.set_ylabel("position z")
    for grid, used in ((axes[:rows], len(heads)), (axes[rows:], len(heads) if detail_tokens else 0)):
        for ax in list(grid.flat)[used:]:
            ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
