"""An SDPA attention that can also read, and optionally rewrite, the attention row of the current query.

Found-in-the-Middle needs, for some layers, the attention weights of the
*current* query (the last prompt token at prefill, the new token at decode)
over all keys, and during answer generation it replaces that row by a
re-weighted one. Both are O(L) per head, so the full L×L matrix that eager
attention with `output_attentions=True` would build is never needed.

How it plugs in: `probed_sdpa_attention_forward` is registered with
transformers' public `AttentionInterface` (and the SDPA mask builder with
`AttentionMaskInterface`) under `PROBE_IMPLEMENTATION`; `install_probe(model)`
switches `model.config._attn_implementation` to that name and gives every
attention module the same `AttentionProbe`. The function first runs
transformers' own `sdpa_attention_forward` unchanged; only for layers the
probe is asked about does it recompute the last R query rows as
`softmax(q Kᵀ · scaling + mask)` and, when an edit is requested, replace those
rows' outputs by `(edited weights) · V`. With no request the output *is*
SDPA's output (bit-identical); recording alone never changes it either.

Works for any HF attention that calls the attention interface: this project's
policy hook (`repo_train.modeling.attention`) and plain Llama/Qwen2/OLMo-2, GQA
included (query head h reads key/value head h // (H / H_kv), as `repeat_kv`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from repo_train.modeling.attention import attention_modules

PROBE_IMPLEMENTATION = "sdpa_probe"
#: Implementations the probe may replace: it wraps SDPA, so it only stands in for SDPA.
_WRAPPABLE = ("sdpa", PROBE_IMPLEMENTATION)

#: `edit(layer_idx, weights [B, H, R, K]) -> new weights [B, H, R, K]` (float32).
RowEditor = Callable[[int, torch.Tensor], torch.Tensor]


class AttentionProbe:
    """What the probed attention does for one model; shared by all its layers.

    `rows[layer]` holds the recorded weights `[B, H, R, K]` (or `[B, R, K]`
    averaged over heads when `head_mean`) of the last forward through that
    layer; `edited_rows[layer]` the weights after `edit`, for layers that are
    both recorded and edited. R = `query_rows`, the trailing query rows
    treated as "current" (1 in generation; more only to check a KV-cached
    generation against one recomputation).
    """

    def __init__(self) -> None:
        self.previous_implementation: str | None = None
        self.clear()

    def clear(self) -> None:
        """Stop recording and editing; drop what was recorded."""
        self.record_layers: frozenset[int] = frozenset()
        self.edit_layers: frozenset[int] = frozenset()
        self.edit: RowEditor | None = None
        self.query_rows = 1
        self.head_mean = False
        self.rows: dict[int, torch.Tensor] = {}
        self.edited_rows: dict[int, torch.Tensor] = {}

    def request(
        self,
        record: Iterable[int] = (),
        edit: RowEditor | None = None,
        edit_layers: Iterable[int] = (),
        query_rows: int = 1,
        head_mean: bool = False,
    ) -> AttentionProbe:
        """Ask for the next forwards: record rows of `record` layers, rewrite rows of `edit_layers` with `edit`."""
        edit_layers = frozenset(edit_layers)
        if edit_layers and edit is None:
            raise ValueError("edit_layers given without an edit function; pass edit=fn(layer, weights) -> weights")
        if query_rows < 1:
            raise ValueError(f"query_rows must be >= 1, got {query_rows}")
        self.clear()
        self.record_layers, self.edit_layers, self.edit = frozenset(record), edit_layers, edit
        self.query_rows, self.head_mean = query_rows, head_mean
        return self

    def wants(self, layer: int) -> bool:
        return layer in self.record_layers or layer in self.edit_layers


def register_probe_attention() -> None:
    """Make `PROBE_IMPLEMENTATION` a valid `attn_implementation` (idempotent); masks are SDPA's."""
    AttentionInterface.register(PROBE_IMPLEMENTATION, probed_sdpa_attention_forward)
    AttentionMaskInterface.register(PROBE_IMPLEMENTATION, sdpa_mask)


def current_query_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
) -> torch.Tensor:
    """Softmax weights `[B, H, R, K]` (float32) of the last R query rows `query [B, H, R, D]` over `key [B, H_kv, K, D]`.

    `attention_mask` is what the attention interface received: a 4D bool or
    additive mask whose last R rows are these rows, or None for plain causal
    attention (the j-th of the R rows then sees keys 0 .. K - R + j).
    """
    batch, heads, rows, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    grouped = query.float().reshape(batch, kv_heads, groups * rows, dim)
    scores = (grouped @ key.float().transpose(-1, -2)).reshape(batch, heads, rows, keys) * scaling
    if attention_mask is None:
        own = keys - rows + torch.arange(rows, device=key.device)  # key index of each current row's own token
        allowed = torch.arange(keys, device=key.device)[None, :] <= own[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
    else:
        mask = attention_mask[..., -rows:, :keys]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    return torch.softmax(scores, dim=-1)


def weighted_values(weights: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`weights [B, H, R, K] · value [B, H_kv, K, D]` -> `[B, H, R, D]` (float32), GQA groups as `repeat_kv`."""
    batch, heads, rows, keys = weights.shape
    kv_heads = value.shape[1]
    grouped = weights.reshape(batch, kv_heads, (heads // kv_heads) * rows, keys)
    return (grouped @ value.float()).reshape(batch, heads, rows, value.shape[-1])


def probed_sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Transformers' SDPA attention, plus the probe's record/edit of the current query rows (see module doc)."""
    output, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )
    probe: AttentionProbe | None = getattr(module, "attention_probe", None)
    layer = module.layer_idx
    if probe is None or not probe.wants(layer):
        return output, None
    if dropout:
        raise RuntimeError("the attention probe reads exact attention rows; call model.eval() (dropout must be 0)")
    rows = min(probe.query_rows, query.shape[2])
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    weights = current_query_weights(query[:, :, -rows:], key, attention_mask, scale)
    if layer in probe.record_layers:
        probe.rows[layer] = weights.mean(dim=1) if probe.head_mean else weights
    if layer in probe.edit_layers:
        weights = probe.edit(layer, weights)
        if layer in probe.record_layers:
            probe.edited_rows[layer] = weights.mean(dim=1) if probe.head_mean else weights
        edited = weighted_values(weights, value).transpose(1, 2).to(output.dtype)  # [B, R, H, D] like `output`
        output = torch.cat([output[:, :-rows], edited], dim=1)
    return output, None


def install_probe(model: nn.Module) -> AttentionProbe:
    """Switch `model` to the probed SDPA attention and return its (idle) probe; `remove_probe` undoes it."""
    current = getattr(model.config, "_attn_implementation", None)
    if current not in _WRAPPABLE:
        raise ValueError(
            f"the attention probe wraps SDPA, but this model uses attn_implementation={current!r}; "
            "load it with attn_implementation='sdpa' (evaluation.model_loading.load_model's default)"
        )
    attns = attention_modules(model)
    if any(hasattr(attn, "attention_probe") for attn in attns):
        raise RuntimeError("an attention probe is already installed on this model; remove it first (remove_probe)")
    register_probe_attention()
    probe = AttentionProbe()
    probe.previous_implementation = current
    for attn in attns:
        attn.attention_probe = probe
    model.config._attn_implementation = PROBE_IMPLEMENTATION
    return probe


def probe_of(model: nn.Module) -> AttentionProbe:
    """The probe `install_probe` put on `model` (a clear error when there is none)."""
    probe = getattr(attention_modules(model)[0], "attention_probe", None)
    if probe is None:
        raise RuntimeError("no attention probe on this model; call install_probe(model) first")
    return probe


def remove_probe(model: nn.Module) -> None:
    """Give the model back its previous attention implementation and drop the probe."""
    probe = probe_of(model)
    for attn in attention_modules(model):
        del attn.attention_probe
    model.config._attn_implementation = probe.previous_implementation


@contextmanager
def probing(model: nn.Module) -> Iterator[AttentionProbe]:
    """`with probing(model) as probe: probe.request(record=range(n)); model(ids)` then read `probe.rows`."""
    probe = install_probe(model)
    try:
        yield probe
    finally:
        remove_probe(model)
