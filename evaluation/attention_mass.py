"""Attention mass by region (REPO, Table 4): how much of the current query's attention lands on the needle.

Given attention probability rows (the current query over all keys, e.g.
`evaluation.attention_probe` rows `[B, H, R, K]`, or the last row of a full
matrix), the mass on the needle tokens, on the query tokens and on the rest, in
total and per token (mass / tokens in the region), averaged over all rows
(layers, heads, batch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

Span = tuple[int, int]


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
