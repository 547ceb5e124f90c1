"""The position-scaling baselines the CALIOPE and PCD papers compare against: Ms-PoE and Attention Buckets.

(PI is `evaluation.methods.pi`.)

Ms-PoE (Zhang et al., "Found in the Middle"): in layers >= 2, head h sees
position i at i / r_h, with per-head ratios r = r_min + (r_max - r_min) · k / H
(k = 0..H-1, r_min = 1.2, r_max = 1.8). Ratios go to heads by their position
sensitivity, measured on each prompt at the prefill: the fraction of keys whose
attention weight from the last prompt token exceeds `outlier_factor` × the row
mean (unrotated q, k). By default every rule is the authors' code's
(VITA-Group/Ms-PoE, `utils/modify_arch/llama.py` as of 2024-03-28):

- `outlier_factor=3` (an earlier version of that file used 4);
- `head_order=outlier`: with `order` the heads sorted by outlier fraction,
  most first, head h gets ratio r[order[h]] (the ratio table indexed by the
  sort permutation, as `cos[head_order]` does there); `outlier_rank` is this
  project's earlier reading, head h gets r[rank of h] (the head with the most
  outliers the smallest ratio); `index` gives head h the h-th ratio;
- `gqa_keys=group_first`: on a grouped-query model each shared key head is
  rotated with the ratio of the first query head of its group (their
  `cos[::num_key_value_groups]`); `per_query` rotates each query head's copy
  of the keys with that query head's own ratio.

docs/methods/baselines.md gives each difference's effect on SmolLM2.

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
from repo_train.modeling.scaling import refuse_without_rope
from repo_train.modeling.swapping import current_policies

#: An attention weight above this multiple of its row's mean is an outlier (the authors' code at 2024-03-28).
OUTLIER_FACTOR = 3.0
HEAD_ORDERS = ("outlier", "outlier_rank", "index")
GQA_KEYS = ("group_first", "per_query")


def mspoe_ratios(num_heads: int, min_ratio: float, max_ratio: float) -> torch.Tensor:
    """r_k = r_min + (r_max - r_min) · k / H, k = 0..H-1 (float64; the authors' spacing, r_max itself unused)."""
    return min_ratio + (max_ratio - min_ratio) * torch.arange(num_heads, dtype=torch.float64) / num_heads


def outlier_fraction(
    query: torch.Tensor,
    keys: torch.Tensor,
    key_mask: torch.Tensor | None,
    scaling: float,
    factor: float = OUTLIER_FACTOR,
):
    """Per head, the share of real keys whose attention weight from `query` exceeds `factor` × the mean weight.

    `query [B, H, D]` (the last prompt token), `keys [B, H, S, D]` (unrotated),
    `key_mask [B, S]` (1 = real token) or None. Returns `[B, H]` (float32).
    """
    scores = torch.einsum("bhd,bhsd->bhs", query.float(), keys.float()) * scaling
    if key_mask is None:
        key_mask = torch.ones(scores.shape[0], scores.shape[-1], dtype=torch.bool, device=scores.device)
    real = key_mask.bool()[:, None, :]
    weights = scores.masked_fill(~real, -math.inf).softmax(dim=-1)
    count = real.sum(dim=-1, keepdim=True).float()  # [B, 1, 1]
    outliers = (weights > factor / count) & real
    return outliers.float().sum(dim=-1) / count[..., 0]


def outlier_order(fraction: torch.Tensor) -> torch.Tensor:
    """`[B, H]` the heads sorted by outlier fraction, most first (ties keep head order)."""
    return torch.sort(fraction, dim=-1, descending=True, stable=True).indices


def head_ranks(fraction: torch.Tensor) -> torch.Tensor:
    """`[B, H]` rank of each head, 0 = the most outliers (ties keep head order): the inverse of `outlier_order`."""
    return torch.argsort(outlier_order(fraction), dim=-1)


def ratio_indices(fraction: torch.Tensor | None, head_order: str, batch: int, heads: int, device) -> torch.Tensor:
    """`[B, H]` index into the ratio table of each head under `head_order` (`fraction` unused for `index`)."""
    if head_order == "index":
        return torch.arange(heads, device=device).expand(batch, heads)
    return outlier_order(fraction) if head_order == "outlier" else head_ranks(fraction)


def key_ratio_heads(heads: int, key_heads: int, gqa_keys: str) -> torch.Tensor:
    """`[H]` which query head's ratio rotates each query head's copy of the keys: its own (`per_query`), or the
    first head of its key group (`group_first`, one ratio per shared key head)."""
    own = torch.arange(heads)
    return own if gqa_keys == "per_query" else (own // (heads // key_heads)) * (heads // key_heads)


class MsPoePolicy(PositionPolicy):
    """Identical to `RopePolicy(encoding)` except that head h sees positions / r_h (per head, per row)."""

    name = "ms_poe"
    per_head = True

    def __init__(
        self,
        encoding: RotaryEncoding,
        ratios: torch.Tensor,
        head_order: str = "outlier",
        outlier_factor: float = OUTLIER_FACTOR,
        key_heads: torch.Tensor | None = None,
    ):
        self.encoding = encoding
        self.ratios = ratios
        self.head_order = head_order
        self.outlier_factor = outlier_factor
        #: `[H]` whose ratio rotates each query head's copy of the keys (`key_ratio_heads`); None = its own.
        self.key_heads = key_heads
        #: `[B, H]` index into `ratios` of each head for the current batch (set at the prefill, kept for its
        #: decoding steps).
        self.ranks: torch.Tensor | None = None
        #: `[B, S]` prompt mask of the current batch, so padding is not counted as keys.
        self.key_mask: torch.Tensor | None = None

    def reset(self, key_mask: torch.Tensor | None) -> None:
        self.ranks, self.key_mask = None, key_mask

    def _rank(self, attention, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, heads = hidden_states.shape[0], self.ratios.shape[0]
        if self.head_order == "index":
            return ratio_indices(None, "index", batch, heads, hidden_states.device)
        query, key, _ = attention._project_qkv(hidden_states)  # an extra q/k/v projection, at the prefill only
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        mask = self.key_mask if self.key_mask is not None and self.key_mask.shape == hidden_states.shape[:2] else None
        fraction = outlier_fraction(query[:, :, -1], key, mask, attention.scaling, self.outlier_factor)
        return ratio_indices(fraction, self.head_order, batch, heads, hidden_states.device)

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        if self.ranks is None or self.ranks.shape[0] != hidden_states.shape[0]:
            self.ranks = self._rank(attention, hidden_states)
        ratios = self.ratios.to(hidden_states.device)[self.ranks].float()  # [B, H]
        positions = position_ids[:, None, :].float() / ratios[..., None]
        if self.key_heads is None:
            return Rotation.from_positions(self.encoding, positions)
        key_positions = positions[:, self.key_heads.to(positions.device)]
        return SplitRotation(encoding=self.encoding, positions=positions, key_positions=key_positions)

    def describe(self) -> str:
        return f"{self.name}({float(self.ratios[0]):g}..{float(self.ratios[-1]):g}, {self.head_order})"


@dataclass
class SplitRotation(Rotation):
    """Queries rotated by `positions`, keys by `key_positions` (both `[B, H, S]`): Ms-PoE's shared key heads."""

    key_positions: torch.Tensor | None = None

    def apply(self, query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotated_query, _ = self.encoding.rotate(query, key, self.positions)
        _, rotated_key = self.encoding.rotate(query, key, self.key_positions)
        return rotated_query, rotated_key


@register_method
@dataclass
class MsPoE(PolicyMethod):
    """`ms_poe:min_ratio=1.2,max_ratio=1.8,start_layer=2,head_order=outlier,outlier_factor=3,gqa_keys=group_first`:
    per-head position scaling, by default as the authors' code does it."""

    name: ClassVar[str] = "ms_poe"

    min_ratio: float = 1.2
    """Smallest head ratio r_min (given to the most position-sensitive head)."""
    max_ratio: float = 1.8
    """Ratios are spaced from r_min towards r_max (r_min + (r_max - r_min)(H-1)/H is the largest)."""
    start_layer: int = 2
    """First layer with Ms-PoE (the authors' runs use layers 2..L-1; earlier layers stay as they are)."""
    head_order: str = "outlier"
    """outlier: head h gets ratio[order[h]], order = heads by outlier share (the authors' code); outlier_rank: head
    h gets ratio[rank of h] (this project's earlier reading); index: ratio[h] (simplified, no statistic)."""
    outlier_factor: float = OUTLIER_FACTOR
    """An attention weight above this multiple of its row's mean is an outlier (3 in the authors' code)."""
    gqa_keys: str = "group_first"
    """group_first: a shared key head takes the ratio of its group's first query head (the authors' code);
    per_query: each query head's copy of the keys takes that head's own ratio. No effect without GQA."""
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
        if not (math.isfinite(self.outlier_factor) and self.outlier_factor > 0):
            raise ValueError(f"ms_poe: outlier_factor must be a finite number > 0, got {self.outlier_factor!r}")
        if self.gqa_keys not in GQA_KEYS:
            raise ValueError(f"ms_poe: gqa_keys must be one of {list(GQA_KEYS)}, got {self.gqa_keys!r}")

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        if self.start_layer >= len(current):
            raise ValueError(f"ms_poe: start_layer={self.start_layer} but the model has {len(current)} layers")
        heads = model.config.num_attention_heads
        ratios = mspoe_ratios(heads, self.min_ratio, self.max_ratio)
        key_heads = getattr(model.config, "num_key_value_heads", None) or heads
        shared_keys = key_ratio_heads(heads, key_heads, self.gqa_keys) if key_heads < heads else None
        default_encoding = RotaryEncoding.from_config(model.config)
        policies: list[PositionPolicy] = []
        for index, policy in enumerate(current):
            if index < self.start_layer or isinstance(policy, NopePolicy):
                policies.append(policy)
            elif type(policy) is RopePolicy:
                encoding = policy.encoding or default_encoding
                policies.append(MsPoePolicy(encoding, ratios, self.head_order, self.outlier_factor, shared_keys))
            else:
                raise ValueError(
                    f"ms_poe scales RoPE positions per head, but layer {index} uses the {policy.name!r} policy; "
                    "apply ms_poe to RoPE (or RoPE/NoPE) models only"
                )
        refuse_without_rope(current, "ms_poe", "scales RoPE positions per head", self.start_layer)
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
