"""`head_scale`: a trainable position policy with two options and a schedule, from outside the project.

Head h sees token i at position i · s_h, with s_h = exp(a_h) learned per head and layer. Its options
(`HeadScalePosition`, the class `model.position` names; kept in config.json as `position_options`):

- `start_scale`: s_h of fresh weights (every head starts at this scale);
- `warmup_steps`: the schedule. For the first N training steps the scale used is blended from 1 (plain
  RoPE) towards the learned one, s = 1 + w (s_h - 1) with w = step / N, so training starts from RoPE's
  positions; w = 1 afterwards and at evaluation.

One registration line makes it a position method of every command (`fit --import
examples.extension.head_scale_policy --model.position HeadScalePosition --model.position.warmup_steps 2`,
or `--model.position head_scale` for its defaults).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from repo_train.modeling import PositionConfig, PositionPolicy, RotaryEncoding, Rotation
from repo_train.modeling.policy import linear_positions, register_policy


@dataclass(frozen=True)
class HeadScalePosition(PositionConfig):
    """The policy's options (`model.position: {class_path: HeadScalePosition, init_args: {...}}`)."""

    method: ClassVar[str] = "head_scale"

    start_scale: float = 1.0
    """Per-head position scale of fresh weights (> 0)."""
    warmup_steps: int = 0
    """Training steps over which the scale is blended in from 1 (0 = learned scales from the start)."""

    def __post_init__(self) -> None:
        if not self.start_scale > 0:
            raise ValueError(f"HeadScalePosition.start_scale must be > 0, got {self.start_scale}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"HeadScalePosition.warmup_steps must be an int >= 0, got {self.warmup_steps!r}")


class HeadLogScale(nn.Module):
    """a_h: one learned log-scale per head."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(num_heads))


@register_policy
class HeadScalePolicy(PositionPolicy):
    """Positions i · exp(a_h) per head h, a_h learned; blended in from RoPE over `warmup_steps`."""

    name = "head_scale"
    per_head = True
    Options = HeadScalePosition

    def __init__(self, encoding: RotaryEncoding, num_heads: int, options: HeadScalePosition):
        self.encoding = encoding
        self.num_heads = num_heads
        self.options = options
        #: w of the schedule: 1 = the learned scales as they are (evaluation, and after the warm-up).
        self.blend = 1.0

    @classmethod
    def from_config(cls, config, encoding):
        return cls(encoding or RotaryEncoding.from_config(config), config.num_attention_heads, cls.options_from(config))

    def learned_modules(self, config):
        return {"head_log_scale": HeadLogScale(self.num_heads)}

    def init_learned(self, name, module):
        nn.init.constant_(module.log_scale, math.log(self.options.start_scale))

    def training_flops_per_token(self, seq_len):
        return 3.0 * self.num_heads  # one multiply per head and token, forward and backward

    def on_train_step(self, step: int) -> dict[str, float]:
        warmup = self.options.warmup_steps
        self.blend = min(1.0, step / warmup) if warmup else 1.0
        return {"head_scale_blend": self.blend}

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        scales = 1.0 + self.blend * (attention.head_log_scale.log_scale.float().exp() - 1.0)
        return Rotation.from_positions(self.encoding, linear_positions(position_ids) * scales[None, :, None])
