"""PCD, Positional Contrastive Decoding (Xiao et al.): contrast the logits with those of an over-rotated RoPE.

Local-aware logits L* come from the same model whose RoPE layers use
over-rotated frequencies (a new position *encoding*, nothing else changes):

    θ*_j = T(x_j) θ_j + (1 - T(x_j)) θ'_j,   T(x) = 2 - exp(α x),   x_j = j / (d/2),  j = 0..d/2-1
    θ'_j = (B')^(-2j/d),  B' = ratio · B

so high frequencies (small j) stay, low ones turn faster and attention looks
more local. On the top-γ tokens of the standard logits L, greedy decoding
picks from

    L̃ = (1 + β) L - β L*          (every other token excluded: -inf)

Defaults: α = 0.2, β = 2.5, ratio = 1e-4, γ = 30. L* costs a second copy of
the batch under the over-rotated encoding: by default (`passes=batched`) as
extra rows of the harness's own forward (`evaluation.methods.row_groups`: one
forward per step, the weights read once for both), `passes=sequential` as a
second forward through its own KV cache (`SideDecoder`, kept in the batch's
scratch). Both give the same logits and hold 2× the baseline's K/V; the
prefill runs the two encodings one after the other in both. β = 0 skips L*
(exactly greedy).
`pcd_salience` reports the paper's S(L) (Eq. 1, `evaluation.salience`) with and without PCD.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from evaluation.methods.base import GenerationState, Method, MethodStack, register_method
from evaluation.methods.decoding import DecodeSettings, TokenizedPrompt, collate, generate_batch
from evaluation.methods.kv_cache import reserved_cache
from evaluation.salience import salience_score
from repo_train.modeling import NopePolicy, PositionPolicy, RopePolicy
from repo_train.modeling.cache_keyword import cache_argument
from repo_train.modeling.rope import RotaryEncoding, default_inv_freq
from repo_train.modeling.scaling import ScaledRopePolicy, refuse_without_rope
from repo_train.modeling.swapping import current_policies, swapped_policies


def rope_base(config) -> float:
    """The RoPE base B (`rope_theta`) of a HF config, transformers 5 (`rope_parameters`) or 4 style."""
    params = getattr(config, "rope_parameters", None) or {}
    base = params.get("rope_theta", getattr(config, "rope_theta", None))
    if base is None:
        raise ValueError(f"{type(config).__name__} states no rope_theta; this method needs a RoPE model")
    return float(base)


def head_dim_of(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def over_rotation_weight(half: int, alpha: float) -> torch.Tensor:
    """T(x_j) = 2 - exp(α x_j), x_j = j / half for j = 0..half-1 (float64)."""
    x = torch.arange(half, dtype=torch.float64) / half
    return 2.0 - torch.exp(alpha * x)


def pcd_inv_freq(inv_freq: torch.Tensor, base: float, alpha: float, ratio: float) -> torch.Tensor:
    """θ* from the model's θ (`inv_freq [d/2]`) and θ' of the lower base ratio · B (float32)."""
    half = inv_freq.shape[0]
    weight = over_rotation_weight(half, alpha)
    theta_low = default_inv_freq(base * ratio, 2 * half).double()
    return (weight * inv_freq.double() + (1.0 - weight) * theta_low).float()


def pcd_encoding(config, alpha: float, ratio: float) -> RotaryEncoding:
    """The over-rotated encoding: the config's own frequencies θ blended with those of base ratio · B."""
    own = RotaryEncoding.from_config(config)
    return RotaryEncoding(pcd_inv_freq(own.inv_freq, rope_base(config), alpha, ratio), own.attention_scaling)


def encoding_policies(current: Sequence[PositionPolicy], encoding: RotaryEncoding, method: str) -> list[PositionPolicy]:
    """The layers' policies with `encoding` in every RoPE layer (a PI scale is kept); NoPE layers stay.

    Identical to the current policies except for the encoding; learned
    positions (REPO) are refused, since their rotation is not a RoPE table.
    """
    out: list[PositionPolicy] = []
    for index, policy in enumerate(current):
        if isinstance(policy, NopePolicy):
            out.append(policy)
        elif type(policy) is ScaledRopePolicy:
            out.append(ScaledRopePolicy(encoding, policy.scale))
        elif type(policy) is RopePolicy:
            out.append(RopePolicy(encoding))
        else:
            raise ValueError(
                f"{method} changes the RoPE encoding, but layer {index} uses the {policy.name!r} policy; "
                f"apply {method} to RoPE (or RoPE/NoPE) models only"
            )
    refuse_without_rope(current, method, "changes the RoPE encoding")
    return out


@dataclass
class SideDecoder:
    """A second forward of the same model under other policies, over its own KV cache.

    Fed, at every step, exactly what the harness fed its own forward (tokens,
    positions, mask of `state`): the prompt at step 0, then the last token.
    """

    policies: list[PositionPolicy]
    cache: Any = None
    drop_mask: bool = False
    steps: int = 0

    @torch.no_grad()
    def step(self, state: GenerationState) -> torch.Tensor:
        """Next-token logits `[B, V]` (float32) of this step under the side policies."""
        if state.step != self.steps:
            raise RuntimeError(f"side decoder at step {self.steps} was given step {state.step}; steps must be in order")
        model = state.model
        if state.step == 0:
            self.cache = reserved_cache(model)
            self.drop_mask = bool((state.attention_mask == 1).all())  # as the harness does
        with swapped_policies(model, self.policies):
            out = model(
                input_ids=state.input_ids,
                attention_mask=None if self.drop_mask else state.attention_mask,
                position_ids=state.position_ids,
                **cache_argument(self.cache),
                use_cache=True,
                logits_to_keep=1,
                return_dict=True,
            )
        self.steps += 1
        return out.logits[:, -1].to(dtype=torch.float32)


#: How a method runs its extra copies of the batch: as rows of the harness's forward, or one forward each.
PASSES = ("batched", "sequential")


def check_passes(method: str, passes: str) -> None:
    if passes not in PASSES:
        raise ValueError(f"{method}: passes must be one of {list(PASSES)}, got {passes!r}")


def spec_params_without_default_passes(params: dict[str, Any]) -> dict[str, Any]:
    """The spec parameters, `passes` left out at its default: batched and sequential give the same outputs,
    and labels (run records, reports) stay those of the runs made before the option existed."""
    if params.get("passes") == PASSES[0]:
        params = {k: v for k, v in params.items() if k != "passes"}
    return params


def contrast_logits(logits: torch.Tensor, local_logits: torch.Tensor, beta: float, top_k: int) -> torch.Tensor:
    """L̃ = (1 + β) L - β L* on the top-k tokens of L; -inf everywhere else."""
    top = logits.topk(min(top_k, logits.shape[-1]), dim=-1).indices
    chosen = (1.0 + beta) * logits.gather(-1, top) - beta * local_logits.gather(-1, top)
    return torch.full_like(logits, -math.inf).scatter(-1, top, chosen)


@register_method
@dataclass
class PositionalContrastiveDecoding(Method):
    """`pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30`: greedy on the contrast with over-rotated RoPE logits."""

    name: ClassVar[str] = "pcd"

    alpha: float = 0.2
    """α of T(x) = 2 - exp(α x): how fast the low frequencies move towards θ' (0 = no change)."""
    beta: float = 2.5
    """β, the contrast strength (0 = plain greedy)."""
    ratio: float = 1e-4
    """B' / B, the lower base of the over-rotated frequencies θ'."""
    gamma: int = 30
    """γ, the number of top tokens of L that may be chosen."""
    passes: str = "batched"
    """batched: L* as extra rows of the harness's forward; sequential: a second forward per step (same logits)."""
    _policies: list[PositionPolicy] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"pcd: alpha must be a finite number >= 0 (T(x) <= 1), got {self.alpha!r}")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"pcd: beta must be a finite number >= 0, got {self.beta!r}")
        if not (math.isfinite(self.ratio) and 0 < self.ratio <= 1):
            raise ValueError(
                f"pcd: ratio (B'/B) must be in (0, 1], got {self.ratio!r}: the contrast copy's base B' = ratio * B "
                "must be lower than the model's for it to over-rotate (above 1 it under-rotates and reverses the "
                "contrast; 1 reproduces greedy decoding)"
            )
        if self.gamma < 1:
            raise ValueError(f"pcd: gamma (top tokens kept) must be >= 1, got {self.gamma!r}")
        check_passes("pcd", self.passes)

    def params(self):
        return spec_params_without_default_passes(super().params())

    def attach(self, model, tokenizer) -> None:
        encoding = pcd_encoding(model.config, self.alpha, self.ratio)
        self._policies = encoding_policies(current_policies(model), encoding, "pcd")

    def detach(self, model) -> None:
        self._policies = None

    def process_logits(self, step: int, logits: torch.Tensor, state: GenerationState) -> torch.Tensor:
        if self.beta == 0:
            return contrast_logits(logits, logits, 0.0, self.gamma)  # L* has weight 0: no second forward
        if self._policies is None:
            raise RuntimeError("pcd: attach the method to the model before generating")
        if self.passes == "batched":
            (local,) = state.row_group_logits(self)
        else:
            local = state.scratch_for(self).setdefault("side", SideDecoder(self._policies)).step(state)
        return contrast_logits(logits, local, self.beta, self.gamma)

    def forced_scoring_problem(self, model) -> str | None:
        return (  # beta = 0 too: greedy, but still -inf outside the top gamma
            "pcd's contrast (1 + beta) L - beta L* is a decoding rule, not the model's distribution: its softmax is "
            "about (1 + beta) times sharper and is -inf outside the top gamma tokens, so a gold log-likelihood under "
            "it mixes sharpness with ranking and cannot be compared with the baseline's; score pcd by the task's metric"
        )

    def row_groups(self) -> list[list[PositionPolicy]]:
        if self.passes != "batched" or self.beta == 0:
            return []
        if self._policies is None:
            raise RuntimeError("pcd: attach the method to the model before generating")
        return [self._policies]


@dataclass
class _LogitsTap(Method):
    """Records the step-0 logits it sees (for `pcd_salience`); not registered."""

    name: ClassVar[str] = "logits_tap"
    seen: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        if step == 0:
            self.seen.append(logits.clone())
        return logits


def pcd_salience(
    model,
    tokenizer,
    prompts: Sequence[str],
    answers: Sequence[str],
    method: PositionalContrastiveDecoding | None = None,
    answer_prefix: str = " ",
    batch_size: int = 8,
) -> dict[str, float]:
    """S(L) at the first answer step with and without PCD: `{'standard': S(L), 'pcd': S(L̃), 'queries': N}`.

    The gold token is the first token of `answer_prefix + answer` (no special
    tokens). Both scores come from one harness pass (the same forwards).
    """
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(
            f"pcd_salience needs one answer per prompt; got {len(prompts)} prompts, {len(answers)} answers"
        )
    method = method or PositionalContrastiveDecoding()
    gold = torch.tensor([tokenizer(answer_prefix + a, add_special_tokens=False)["input_ids"][0] for a in answers])
    before, after = _LogitsTap(), _LogitsTap()
    stack = MethodStack([before, method, after])
    settings = DecodeSettings(max_new_tokens=1, batch_size=batch_size)
    with stack.attached(model, tokenizer):
        for start in range(0, len(prompts), batch_size):  # collated in the given order, so rows match `gold`
            ids = tokenizer(list(prompts[start : start + batch_size]))["input_ids"]  # as `tokenize_prompts` does
            batch = collate([TokenizedPrompt(tuple(row)) for row in ids], tokenizer.pad_token_id, model.device)
            generate_batch(model, tokenizer, batch, settings, stack)
    return {
        "standard": salience_score(torch.cat(before.seen), gold),
        "pcd": salience_score(torch.cat(after.seen), gold),
        "queries": float(len(prompts)),
    }
