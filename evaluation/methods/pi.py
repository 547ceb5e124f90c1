"""Position Interpolation (Chen et al., 2023): every RoPE layer sees positions divided by S.

The demonstration that a method is nothing but a per-layer position policy:
`ScaledRopePolicy` is `RopePolicy` with its own encoding except that the
positions are `position_ids / S`. With S = 1 the rotation is bit-identical to
the untouched model (same angles, same arithmetic); the tests check that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from evaluation.methods.base import PolicyMethod, register_method
from repo_train.modeling import NopePolicy, PositionPolicy, RopePolicy, RotaryEncoding, Rotation
from repo_train.modeling.policy import linear_positions


class ScaledRopePolicy(RopePolicy):
    """Identical to `RopePolicy(encoding)` except that token i gets position i / scale."""

    name = "scaled_rope"

    def __init__(self, encoding: RotaryEncoding, scale: float):
        super().__init__(encoding)
        self.scale = float(scale)

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return Rotation.from_positions(self.encoding, linear_positions(position_ids) / self.scale)

    def describe(self) -> str:
        return f"{self.name}(1/{self.scale:g})"


@register_method
@dataclass
class PositionInterpolation(PolicyMethod):
    """`pi:scale=S`: positions / S in every RoPE layer (NoPE layers stay unrotated)."""

    name: ClassVar[str] = "pi"

    scale: float
    """S > 0; S > 1 squeezes a longer context into the trained position range."""

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"pi: scale must be > 0, got {self.scale!r}")

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        encoding = RotaryEncoding.from_config(model.config)
        policies: list[PositionPolicy] = []
        for index, policy in enumerate(current):
            if isinstance(policy, ScaledRopePolicy):  # stacked PI: the scales multiply
                policies.append(ScaledRopePolicy(policy.encoding, policy.scale * self.scale))
            elif type(policy) is RopePolicy:
                policies.append(ScaledRopePolicy(policy.encoding or encoding, self.scale))
            elif isinstance(policy, NopePolicy):
                policies.append(policy)
            else:
                raise ValueError(
                    f"pi scales RoPE positions, but layer {index} uses the {policy.name!r} policy; "
                    "apply pi to RoPE / NoPE models only"
                )
        return policies
