"""REPO: positions predicted from the hidden state (RePo paper, Eq. 5-7).

    r_i     = SiLU(h_i W_g) ⊙ (h_i W_c)        W_g, W_c ∈ R^{d × d_p}
    z_i^(h) = r_i w_z^(h)                       w_z ∈ R^{d_p × H}

Head h rotates q_i by z_i^(h) and k_j by z_j^(h), so the score depends on
z_j^(h) − z_i^(h) (Eq. 7). Token order and the causal mask are unchanged, and
z_j depends on h_j alone, so cached keys keep their rotation during decoding.

The three matrices are registered on the attention module as `gate_map`
(W_gᵀ), `content_map` (W_cᵀ) and `final_map` (w_zᵀ): the layout of the
published RePo checkpoints. They start as OLMo starts new weights
(`init_learned`) and cost 2·(2·d·d_p + d_p·H) forward FLOPs per token
(`training_flops_per_token`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from repo_train.modeling.policy import PositionPolicy, Rotation, linear_positions, register_policy
from repo_train.modeling.position_config import PositionConfig
from repo_train.modeling.rope import RotaryEncoding

#: OLMo's initialisation for new weights: normal(0, 0.02) truncated at 3 std.
REPO_INIT_STD = 0.02


@dataclass(frozen=True)
class RepoPosition(PositionConfig):
    """REPO's options (`model.position: {class_path: RepoPosition, init_args: {...}}`).

    The layer plan's two numbers stay top-level fields of config.json (`repo_start_layer`, `repo_hidden_size`,
    as the published checkpoints have them); the curriculum is kept in its `position_options`.
    """

    method: ClassVar[str] = "repo"

    start_layer: int | None = None
    """First REPO layer; layers below keep RoPE. None = ⌊num_hidden_layers / 3⌋ (or a loaded model's)."""
    hidden_size: int | None = None
    """d_p, width of REPO's position representation. None = hidden_size // 8 (or a loaded model's)."""
    curriculum_start: float = 0.0
    """p0 of the training curriculum z <- (1-p) z + p i that hands over from linear positions (0 = off)."""
    curriculum_steps: int = 0
    """Training steps over which p decays linearly from p0 to 0."""

    def __post_init__(self) -> None:
        # start_layer and hidden_size are checked against the model's shape with the config (`check_position_fields`).
        if not 0.0 <= self.curriculum_start <= 1.0:
            raise ValueError(f"RepoPosition.curriculum_start (p0) must be in [0, 1], got {self.curriculum_start}")
        steps = self.curriculum_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"RepoPosition.curriculum_steps must be an int >= 0, got {steps!r}")

    def model_config_fields(self) -> dict[str, Any]:
        fields = {
            "position_method": self.method,
            "position_options": self.changed_options("curriculum_start", "curriculum_steps"),
        }
        if self.start_layer is not None:
            fields["repo_start_layer"] = self.start_layer
        if self.hidden_size is not None:
            fields["repo_hidden_size"] = self.hidden_size
        return fields

    @classmethod
    def from_model_config(cls, config: Any) -> RepoPosition:
        given = dict(getattr(config, "position_options", None) or {})
        unknown = sorted(set(given) - {"curriculum_start", "curriculum_steps"})
        if unknown:
            raise ValueError(
                f"position_options: unknown option(s) {unknown} of 'repo'; its options are "
                "['curriculum_start', 'curriculum_steps'] (start_layer and hidden_size are config fields)"
            )
        return cls(
            start_layer=getattr(config, "repo_start_layer", None),
            hidden_size=getattr(config, "repo_hidden_size", None),
            **given,
        )


@register_policy
class RepoPolicy(PositionPolicy):
    """Learned per-head positions from a SwiGLU predictor on the attention input."""

    name = "repo"
    per_head = True
    Options = RepoPosition

    def __init__(
        self,
        encoding: RotaryEncoding,
        hidden_size: int,
        position_size: int,
        num_heads: int,
        options: RepoPosition | None = None,
    ):
        if position_size < 1 or position_size > hidden_size:
            raise ValueError(
                f"repo_hidden_size (d_p) must be between 1 and hidden_size={hidden_size}, got {position_size}; "
                f"the paper's default is hidden_size // 8 = {hidden_size // 8}."
            )
        self.encoding = encoding
        self.hidden_size = hidden_size
        self.position_size = position_size
        self.num_heads = num_heads
        self.options = options or RepoPosition()
        #: Curriculum weight p of linear positions: z <- (1-p) z + p i. 0 = pure REPO (set by `on_train_step`).
        self.linear_mix = 0.0

    @classmethod
    def from_config(cls, config, encoding: RotaryEncoding | None) -> RepoPolicy:
        return cls(
            encoding or RotaryEncoding.from_config(config),
            config.hidden_size,
            config.repo_hidden_size,
            config.num_attention_heads,
            cls.options_from(config),
        )

    def on_train_step(self, step: int) -> dict[str, float]:
        """The curriculum: p at this step (off when curriculum_start or curriculum_steps is 0)."""
        options = self.options
        if options.curriculum_start <= 0 or options.curriculum_steps <= 0:
            return {}
        self.linear_mix = repo_curriculum_mix(step, options.curriculum_start, options.curriculum_steps)
        return {"repo_linear_mix": self.linear_mix}

    def learned_modules(self, config) -> dict[str, nn.Module]:
        """The three bias-free maps, already started by `init_learned`.

        Built without torch's default init, so that building them draws the
        same random numbers as ever: seeded models keep their weights.
        """
        shapes = {
            "gate_map": (self.hidden_size, self.position_size),
            "content_map": (self.hidden_size, self.position_size),
            "final_map": (self.position_size, self.num_heads),
        }
        modules = {}
        for name, (fan_in, fan_out) in shapes.items():
            module = nn.utils.skip_init(nn.Linear, fan_in, fan_out, bias=False, device=torch.get_default_device())
            self.init_learned(name, module)
            modules[name] = module
        return modules

    def init_learned(self, name: str, module: nn.Module) -> None:
        """OLMo's start for new weights: normal(0, 0.02) truncated at ±3 std, for all three maps."""
        nn.init.trunc_normal_(module.weight, mean=0.0, std=REPO_INIT_STD, a=-3 * REPO_INIT_STD, b=3 * REPO_INIT_STD)

    def training_flops_per_token(self, seq_len: int) -> float:
        """3 × the forward matmuls h·W_g, h·W_c (d × d_p each) and r·w_z (d_p × H), 2 FLOPs per multiply-add."""
        d, d_p, heads = self.hidden_size, self.position_size, self.num_heads
        return 3.0 * 2 * (2 * d * d_p + d_p * heads)

    def saved_bytes_per_token(self, dtype_bytes: int) -> int:
        """h·[W_g; W_c] (2·d_p) and SiLU of the gate (d_p) in the model's dtype, r in float32 (d_p) for the
        float32 map, and the float32 positions z (H) the rotation keeps; nothing per angle."""
        return (3 * dtype_bytes + 4) * self.position_size + 4 * self.num_heads

    def predict(self, attention: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        """z `[B, H, S]` in float32 from h `[B, S, d]`.

        The two d→d_p maps run in the model's dtype (they hold the FLOPs); the
        small d_p→H map runs in float32 with autocast off, because positions
        in the thousands are not representable in bf16 to better than ±8.
        """
        # W_g and W_c in one matmul: one pass over h (and one for its gradient) instead of two.
        stacked = torch.cat((attention.gate_map.weight, attention.content_map.weight))
        gate, content = F.linear(hidden_states, stacked).chunk(2, dim=-1)
        r = F.silu(gate) * content
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            z = F.linear(r.float(), attention.final_map.weight.float())
        return z.transpose(1, 2)

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        z = self.predict(attention, hidden_states)
        if self.linear_mix:
            p = float(self.linear_mix)
            z = (1.0 - p) * z + p * linear_positions(position_ids)
        return Rotation.from_positions(self.encoding, z)

    def describe(self) -> str:
        return f"repo(d_p={self.position_size})"


def repo_curriculum_mix(step: int, start_mix: float, total_steps: int) -> float:
    """Weight p of linear positions at `step`: linear from `start_mix` to 0 over `total_steps`."""
    if total_steps <= 0 or step >= total_steps:
        return 0.0
    if not 0.0 <= start_mix <= 1.0:
        raise ValueError(f"curriculum start mix p0 must be in [0, 1], got {start_mix}")
    return start_mix * (1.0 - step / total_steps)
