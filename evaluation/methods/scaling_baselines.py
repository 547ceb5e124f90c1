"""The position-scaling baselines the CALIOPE and PCD papers compare against: Ms-PoE and Attention Buckets.

(PI is `evaluation.methods.pi`.)

Ms-PoE (Zhang et al., "Found in the Middle"): in layers >= 2, head h sees
position i at i / r_h, with per-head ratios r = r_min + (r_max - r_min) · k / H
(k = 0..H-1, r_min = 1.2, r_max = 1.8, as in the authors' code). Ratios go to
heads by their position sensitivity, measured on each prompt at the prefill:
the fraction of keys whose attention weight from the last prompt token exceeds
4× the row mean (unrotated q, k; the authors' `_calculate_outlier`). The head
with the most such outliers gets the smallest ratio. `head_order=index` is the
simplified ordering (head h gets the h-th ratio), no statistic needed.

Attention Buckets (Chen et al., "Fortify the Shortest Stave"): the prompt runs
in parallel under several RoPE bases: by default (`passes=batched`) as extra
rows of the harness's own forward, one copy of the batch per base, so a step
reads the weights once for all bases (`evaluation.methods.row_groups`);
`passes=sequential` runs a `SideDecoder` per base (one forward each, as PCD's
second forward), with the same logits. The next-token
distributions p_j are combined: `combine=confidence` (default) weights them by
α_j = max_v p_j(v) / Σ_k max_v p_k(v), our reading of the paper's "weighted by
prediction confidence"; `combine=mean` averages them. The logits handed on are
log p̂. A base equal to the model's reuses the harness's own forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from evaluation.methods.base import GenerationState, Method, register_method
from evaluation.methods.pcd import (
    SideDecoder,
    check_passes,
    encoding_policies,
    head_dim_of,
    rope_base,
    spec_params_without_default_passes,
)
from evaluation.methods.policy_method import PolicyMethod
from repo_train.modeling import NopePolicy, PositionPolicy, RopePolicy, Rotation
from repo_train.modeling.rope import RotaryEncoding, default_inv_freq
from repo_train.modeling.swapping import current_policies

#: An attention weight above this multiple of its row's mean is an outlier (Ms-PoE code).
OUTLIER_FACTOR = 4.0
HEAD_ORDERS = ("outlier", "index")


def mspoe_ratios(num_heads: int, min_ratio: float, max_ratio: float) -> torch.Tensor:
    """r_k = r_min + (r_max - r_min) · k / H, k = 0..H-1 (float64; the authors' spacing, r_max itself unused)."""
    return min_ratio + (max_ratio - min_ratio) * torch.arange(num_heads, dtype=torch.float64) / num_heads


def outlier_fraction(query: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor | None, scaling: float):
    """Per head, the share of real keys whose attention weight from `query` exceeds 4× the mean weight.

    `query [B, H, D]` (the last prompt token), `keys [B, H, S, D]` (unrotated),
    `key_mask [B, S]` (1 = real token) or None. Returns `[B, H]` (float32).
    """
    scores = torch.einsum("bhd,bhsd->bhs", query.float(), keys.float()) * scaling
    if key_mask is None:
        key_mask = torch.ones(scores.shape[0], scores.shape[-1], dtype=torch.bool, device=scores.device)
    real = key_mask.bool()[:, None, :]
    weights = scores.masked_fill(~real, -math.inf).softmax(dim=-1)
    count = real.sum(dim=-1, keepdim=True).float()  # [B, 1, 1]
    outliers = (weights > OUTLIER_FACTOR / count) & real
    return outliers.float().sum(dim=-1) / count[..., 0]


def head_ranks(fraction: torch.Tensor) -> torch.Tensor:
    """`[B, H]` rank of each head, 0 = the most outliers (ties keep head order)."""
    order = torch.sort(fraction, dim=-1, descending=True, stable=True).indices
    return torch.argsort(order, dim=-1)


class MsPoePolicy(PositionPolicy):
    """Identical to `RopePolicy(encoding)` except that head h sees positions / r_h (per head, per row)."""

    name = "ms_poe"
    per_head = True

    def __init__(self, encoding: RotaryEncoding, ratios: torch.Tensor, head_order: str = "outlier"):
        self.encoding = encoding
        self.ratios = ratios
        self.head_order = head_order
        #: `[B, H]` rank of each head for the current batch (set at the prefill, kept for its decoding steps).
        self.ranks: torch.Tensor | None = None
        #: `[B, S]` prompt mask of the current batch, so padding is not counted as keys.
        self.key_mask: torch.Tensor | None = None

    def reset(self, key_mask: torch.Tensor | None) -> None:
        self.ranks, self.key_mask = None, key_mask

    def _rank(self, attention, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, heads = hidden_states.shape[0], self.ratios.shape[0]
        if self.head_order == "index":
            return torch.arange(heads, device=hidden_states.device).expand(batch, heads)
        query, key, _ = attention._project_qkv(hidden_states)  # an extra q/k/v projection, at the prefill only
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        mask = self.key_mask if self.key_mask is not None and self.key_mask.shape == hidden_states.shape[:2] else None
        return head_ranks(outlier_fraction(query[:, :, -1], key, mask, attention.scaling))

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        if self.ranks is None or self.ranks.shape[0] != hidden_states.shape[0]:
            self.ranks = self._rank(attention, hidden_states)
        ratios = self.ratios.to(hidden_states.device)[self.ranks].float()  # [B, H]
        positions = position_ids[:, None, :].float() / ratios[..., None]
        return Rotation.from_positions(self.encoding, positions)

    def describe(self) -> str:
        return f"{self.name}({float(self.ratios[0]):g}..{float(self.ratios[-1]):g}, {self.head_order})"


@register_method
@dataclass
class MsPoE(PolicyMethod):
    """`ms_poe:min_ratio=1.2,max_ratio=1.8,start_layer=2,head_order=outlier`: per-head position scaling."""

    name: ClassVar[str] = "ms_poe"

    min_ratio: float = 1.2
    """Smallest head ratio r_min (given to the most position-sensitive head)."""
    max_ratio: float = 1.8
    """Ratios are spaced from r_min towards r_max (r_min + (r_max - r_min)(H-1)/H is the largest)."""
    start_layer: int = 2
    """First layer with Ms-PoE (the authors' runs use layers 2..L-1; earlier layers stay as they are)."""
    head_order: str = "outlier"
    """outlier: ratios by the outlier statistic of each prompt (paper); index: by head index (simplified)."""
    _ms_policies: list[MsPoePolicy] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_ratio) and self.min_ratio > 0):
            raise ValueError(f"ms_poe: min_ratio must be a finite number > 0, got {self.min_ratio!r}")
        if not (math.isfinite(self.max_ratio) and self.max_ratio >= self.min_ratio):
            raise ValueError(f"ms_poe: max_ratio must be >= min_ratio={self.min_ratio:g}, got {self.max_ratio!r}")
        if self.start_layer < 0:
            raise ValueError(f"ms_poe: start_layer must be >= 0, got {self.start_layer!r}")
        if self.head_order not in HEAD_ORDERS:
            raise ValueError(f"ms_poe: head_order must be one of {list(HEAD_ORDERS)}, got {self.head_order!r}")

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        if self.start_layer >= len(current):
            raise ValueError(f"ms_poe: start_layer={self.start_layer} but the model has {len(current)} layers")
        ratios = mspoe_ratios(model.config.num_attention_heads, self.min_ratio, self.max_ratio)
        default_encoding = RotaryEncoding.from_config(model.config)
        policies: list[PositionPolicy] = []
        for index, policy in enumerate(current):
            if index < self.start_layer or isinstance(policy, NopePolicy):
                policies.append(policy)
            elif type(policy) is RopePolicy:
                policies.append(MsPoePolicy(policy.encoding or default_encoding, ratios, self.head_order))
            else:
                raise ValueError(
                    f"ms_poe scales RoPE positions per head, but layer {index} uses the {policy.name!r} policy; "
                    "apply ms_poe to RoPE (or RoPE/NoPE) models only"
                )
        self._ms_policies = [p for p in policies if isinstance(p, MsPoePolicy)]
        return policies

    def detach(self, model) -> None:
        super().detach(model)
        self._ms_policies = []

    def start(self, state: GenerationState) -> None:
        for policy in self._ms_policies:
            policy.reset(state.batch.attention_mask)


def parse_bases(text: str) -> list[float]:
    """`'10000|17500'` -> [10000.0, 17500.0]; each base must be a finite number > 1."""
    try:
        bases = [float(part) for part in str(text).split("|") if part.strip()]
    except ValueError as err:
        raise ValueError(f"attention_buckets: bases must be numbers separated by '|', got {text!r}") from err
    if not bases:
        raise ValueError("attention_buckets: bases is empty; give e.g. bases=10000|17500|20000")
    bad = [b for b in bases if not (math.isfinite(b) and b > 1)]
    if bad:
        raise ValueError(f"attention_buckets: every base must be a finite number > 1, got {bad}")
    return bases


def combine_buckets(logits: list[torch.Tensor], combine: str) -> torch.Tensor:
    """log p̂ with p̂ = Σ_j α_j softmax(L_j): α_j ∝ max_v p_j(v) ('confidence') or 1/n ('mean')."""
    probs = torch.stack([x.float().softmax(dim=-1) for x in logits])  # [n, B, V]
    if combine == "confidence":
        confidence = probs.amax(dim=-1, keepdim=True)  # [n, B, 1]
        weights = confidence / confidence.sum(dim=0, keepdim=True)
    else:
        weights = torch.full_like(probs[..., :1], 1.0 / probs.shape[0])
    return (weights * probs).sum(dim=0).log()


@register_method
@dataclass
class AttentionBuckets(Method):
    """`attention_buckets:bases=10000|17500|18000|19000|20000|22500,combine=confidence`: parallel RoPE bases."""

    name: ClassVar[str] = "attention_buckets"

    bases: str = "10000|17500|18000|19000|20000|22500"
    """'|'-separated RoPE bases, one parallel forward each (the default is the set we recall for Llama-2-7B)."""
    combine: str = "confidence"
    """confidence: p̂ = Σ α_j p_j with α_j ∝ max p_j; mean: p̂ = mean of p_j. One base: its logits as they are."""
    passes: str = "batched"
    """batched: every base as extra rows of the harness's forward; sequential: one forward per base (same logits)."""
    _buckets: list[list[PositionPolicy] | None] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parse_bases(self.bases)
        if self.combine not in ("confidence", "mean"):
            raise ValueError(f"attention_buckets: combine must be 'confidence' or 'mean', got {self.combine!r}")
        check_passes("attention_buckets", self.passes)

    def params(self):
        bases = "|".join(f"{b:g}" for b in parse_bases(self.bases))
        return spec_params_without_default_passes({"bases": bases, "combine": self.combine, "passes": self.passes})

    def attach(self, model, tokenizer) -> None:
        params = getattr(model.config, "rope_parameters", None) or {}
        if params.get("rope_type", "default") != "default":
            raise ValueError(
                f"attention_buckets replaces the RoPE base, which is defined for rope_type 'default' only; "
                f"this model uses {params.get('rope_type')!r}"
            )
        own, head_dim = rope_base(model.config), head_dim_of(model.config)
        current = current_policies(model)
        self._buckets = []
        for base in parse_bases(self.bases):
            if base == own:
                self._buckets.append(None)  # the harness's forward is this bucket
            else:
                encoding = RotaryEncoding(default_inv_freq(base, head_dim), 1.0)
                self._buckets.append(encoding_policies(current, encoding, "attention_buckets"))

    def detach(self, model) -> None:
        self._buckets = []

    def process_logits(self, step: int, logits: torch.Tensor, state: GenerationState) -> torch.Tensor:
        if not self._buckets:
            raise RuntimeError("attention_buckets: attach the method to the model before generating")
        if self.passes == "batched":
            extra = iter(state.row_group_logits(self))
            per_bucket = [logits if p is None else next(extra) for p in self._buckets]
        else:
            scratch = state.scratch_for(self)
            sides = scratch.setdefault("sides", [None if p is None else SideDecoder(p) for p in self._buckets])
            per_bucket = [logits if side is None else side.step(state) for side in sides]
        if len(per_bucket) == 1:
            return per_bucket[0]
        return combine_buckets(per_bucket, self.combine)

    def row_groups(self) -> list[list[PositionPolicy]]:
        if self.passes != "batched":
            return []
        if not self._buckets:
            raise RuntimeError("attention_buckets: attach the method to the model before generating")
        return [policies for policies in self._buckets if policies is not None]
