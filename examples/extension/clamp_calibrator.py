"""`clamp:limit=L`: a training-free calibrator that stops RoPE positions growing past L.

Every RoPE layer of the model sees token i at position min(i, L), so distances beyond L look like L
(the idea behind position-clamping long-context tricks). One registration line makes it a method of
every command (`--methods clamp:limit=8`, stacked with others by `+`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from evaluation.methods import PolicyMethod, register_method
from repo_train.modeling import RopePolicy, RotaryEncoding, Rotation
from repo_train.modeling.policy import linear_positions


class ClampedRopePolicy(RopePolicy):
    """RoPE whose positions stop at `limit`."""

    def __init__(self, encoding: RotaryEncoding, limit: float):
        super().__init__(encoding)
        self.limit = limit

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return Rotation.from_positions(self.encoding, linear_positions(position_ids).clamp(max=self.limit))


@register_method
@dataclass
class ClampPositions(PolicyMethod):
    """Positions min(i, limit) in every RoPE layer, for the run's duration."""

    name: ClassVar[str] = "clamp"
    limit: float = 64.0

    def __post_init__(self) -> None:
        if self.limit <= 0:
            raise ValueError(f"clamp: limit must be > 0, got {self.limit}")

    def layer_policies(self, model, current):
        encoding = RotaryEncoding.from_config(model.config)
        return [ClampedRopePolicy(encoding, self.limit) if type(p) is RopePolicy else p for p in current]
