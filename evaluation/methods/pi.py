"""Position Interpolation (Chen et al., 2023): every RoPE layer sees positions divided by S.

The demonstration that a method is nothing but a per-layer position policy:
the core's `ScaledRopePolicy` (repo_train.modeling.scaling) is `RopePolicy`
with its own encoding except that the positions are `position_ids / S`. With
S = 1 the rotation is bit-identical to the untouched model (same angles, same
arithmetic); the tests check that. On a layer that is already scaled (by
another `pi` or by `lpes`) S multiplies its scale: the core's one rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from evaluation.methods.base import register_method
from evaluation.methods.policy_method import PolicyMethod
from repo_train.modeling import PositionPolicy
from repo_train.modeling.scaling import ScaledRopePolicy, scaled_policies

__all__ = ["PositionInterpolation", "ScaledRopePolicy"]


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
        return scaled_policies(model, [self.scale] * len(current), method="pi")
