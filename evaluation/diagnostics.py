"""Diagnostics the papers report, as plain math on tensors (the probes that produce the tensors live elsewhere).

- Salience (PCD paper, Eq. 1): S(L) = mean over the scored positions of
  1 / rank of the gold token in the logits. rank = 1 + the number of vocabulary
  entries with a strictly larger logit, so ties count in the gold token's favour.
- Attention mass (REPO, Table 4): given attention probability rows (the current
  query over all keys, e.g. `evaluation.attention_probe` rows `[B, H, R, K]`,
  or the last row of a full matrix), the mass on the needle tokens, on the
  query tokens and on the rest, in total and per token (mass / tokens in the
  region), averaged over all rows (layers, heads, batch).
- REPO position statistics (REPO §5.2), from `repo_train.modeling.record_positions`
  output (per layer `[B, H, S]`, None for NoPE layers): per head, the range
  max z - min z over the tokens (mean over the batch), and the share of 16-token
  chunks that are constant, monotonic or hybrid. The rule, applied per chunk
  (consecutive, non-overlapping windows from token 0; a trailing partial chunk is
  dropped) in this order:
    constant  -- every z in the chunk is within ±0.2 of the chunk's mean;
    monotonic -- else, consecutive differences are all >= 0 or all <= 0;
    hybrid    -- otherwise.
  Shares are over all chunks of all sequences in the batch. (The paper names the
  three patterns; the thresholds above are this project's, stated so that
  numbers can be reproduced.)
- `plot_head_positions`: positions per head against token index, with the
  linear RoPE positions dashed for reference, in the style of the paper's
  position figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

Span = tuple[int, int]
CHUNK = 16
CONSTANT_TOLERANCE = 0.2
PATTERNS = ("constant", "monotonic", "hybrid")


def salience_score(logits: torch.Tensor, gold: torch.Tensor) -> float:
    """Mean reciprocal rank of the gold token ids `gold` [...] in `logits` [..., V] (PCD's S(L))."""
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


@dataclass(frozen=True)
class AttentionMass:
    """Attention mass on the needle, the query and the rest: per token and in total (means over rows)."""

    needle: float
    query: float
    rest: float
    needle_total: float
    query_total: float
    rest_total: float


def _region(spans: Span | Sequence[Span], keys: int, what: str) -> torch.Tensor:
    """A boolean key mask from one (start, end) span or a list of them."""
    if isinstance(spans, tuple) and len(spans) == 2 and all(isinstance(x, int) for x in spans):
        spans = [spans]
    mask = torch.zeros(keys, dtype=torch.bool)
    for span in spans:
        start, end = span
        if not 0 <= start <= end <= keys:
            raise ValueError(f"{what} span {span} is outside the {keys} keys; spans are [start, end) key indices")
        mask[start:end] = True
    if not mask.any():
        raise ValueError(f"the {what} region is empty; give it at least one key")
    return mask


def last_query_rows(matrix: torch.Tensor) -> torch.Tensor:
    """The last query's row of attention matrices [..., Q, K] -> [..., K]."""
    if matrix.dim() < 2:
        raise ValueError(f"expected attention matrices [..., Q, K], got shape {tuple(matrix.shape)}")
    return matrix[..., -1, :]


def attention_mass(
    rows: torch.Tensor,
    needle: Span | Sequence[Span],
    query: Span | Sequence[Span],
    key_mask: torch.Tensor | None = None,
    atol: float = 1e-3,
) -> AttentionMass:
    """Mass of probability rows [..., K] on needle / query / rest keys, averaged over all leading dims.

    `key_mask` ([K] or broadcastable to rows, True = real key) leaves padding out of "rest".
    Rows must be probabilities (non-negative, summing to 1 within `atol`): pass softmax
    weights, not scores.
    """
    rows = rows.float()
    if rows.dim() < 1 or rows.shape[-1] == 0:
        raise ValueError("attention rows need a key dimension: shape [..., K]")
    sums = rows.sum(-1)
    if (rows < -atol).any() or not torch.allclose(sums, torch.ones_like(sums), atol=atol):
        raise ValueError(
            "attention rows must be probabilities (>= 0, each row summing to 1); pass softmax weights, not scores "
            "(for a full matrix [..., Q, K], pass last_query_rows(matrix))"
        )
    keys = rows.shape[-1]
    needle_mask, query_mask = _region(needle, keys, "needle"), _region(query, keys, "query")
    if (needle_mask & query_mask).any():
        raise ValueError("the needle and query spans overlap; each key belongs to one region")
    valid = torch.ones_like(rows, dtype=torch.bool) if key_mask is None else key_mask.bool().expand_as(rows)
    out = {}
    for name, region in (("needle", needle_mask), ("query", query_mask), ("rest", ~(needle_mask | query_mask))):
        members = region.expand_as(rows) & valid
        total = (rows * members).sum(-1)
        count = members.sum(-1)
        per_token = torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))
        out[name], out[f"{name}_total"] = float(per_token.mean()), float(total.mean())
    return AttentionMass(**out)


def attention_mass_by_layer(
    rows_by_layer: Mapping[int, torch.Tensor] | Sequence[torch.Tensor | None],
    needle: Span | Sequence[Span],
    query: Span | Sequence[Span],
    key_mask: torch.Tensor | None = None,
) -> dict[int, AttentionMass]:
    """`attention_mass` of each layer's rows (a probe's `rows` dict, or a list; None entries are skipped)."""
    items = rows_by_layer.items() if isinstance(rows_by_layer, Mapping) else enumerate(rows_by_layer)
    return {layer: attention_mass(rows, needle, query, key_mask) for layer, rows in items if rows is not None}


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
    from matplotlib.figure import Figure

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
