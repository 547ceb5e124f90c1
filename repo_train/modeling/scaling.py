"""Scaled positions: layer l sees token i at position i / s_l.

One policy serves Position Interpolation (one s for every layer) and LPES
(one s per layer, paper Eq. 2). Scaling acts on positions, not frequencies,
so it composes with any static rope type (base, YaRN, ...), and s = 1 gives
the untouched layer bit for bit.

One rule everywhere (PI, the `lpes` method, the LPES search): a scale
multiplies the scale a layer already has. `pi:scale=2+lpes:...` thus gives
layer l positions / (2 · s_l), and scaling an unscaled model (what the search
does for each candidate) is the same as setting the scales.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from repo_train.modeling.policy import NopePolicy, PositionPolicy, RopePolicy, Rotation, linear_positions
from repo_train.modeling.rope import RotaryEncoding
from repo_train.modeling.swapping import current_policies


class ScaledRopePolicy(RopePolicy):
    """Identical to `RopePolicy(encoding)` except that token i gets position i / scale."""

    name = "scaled_rope"
    needs_encoding = True

    def __init__(self, encoding: RotaryEncoding, scale: float):
        if encoding is None:
            raise ValueError("ScaledRopePolicy needs the model's encoding: RotaryEncoding.from_config(config)")
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"a position scale must be a finite number > 0, got {scale!r}")
        super().__init__(encoding)
        self.scale = scale

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return Rotation.from_positions(self.encoding, linear_positions(position_ids) / self.scale)

    def describe(self) -> str:
        return f"{self.name}(1/{self.scale:g})"


def scaled_policies(model: nn.Module, scales: Sequence[float], *, method: str = "scaling") -> list[PositionPolicy]:
    """Policies that divide layer l's positions by `scales[l]` once more, built from the model's current ones.

    RoPE layers get a `ScaledRopePolicy` with their own encoding, whose scale
    is the layer's current scale (1 for plain RoPE) times `scales[l]` (the
    module's one rule). NoPE layers have no positions and stay as they are.
    Any other policy (REPO, ...) is refused: its positions are not token
    indices. Install the result with `swapping.swap_policies`.
    """
    current = current_policies(model)
    if len(scales) != len(current):
        raise ValueError(
            f"got {len(scales)} scales for a model with {len(current)} layers: "
            "use scales searched for this model (one per layer)"
        )
    default_encoding: RotaryEncoding | None = None
    policies: list[PositionPolicy] = []
    for index, (policy, scale) in enumerate(zip(current, scales)):
        if isinstance(policy, NopePolicy):
            policies.append(policy)
        elif type(policy) in (RopePolicy, ScaledRopePolicy):
            encoding = policy.encoding
            if encoding is None:
                default_encoding = default_encoding or RotaryEncoding.from_config(model.config)
                encoding = default_encoding
            if isinstance(policy, ScaledRopePolicy):
                scale = policy.scale * scale
            policies.append(ScaledRopePolicy(encoding, scale))
        else:
            raise ValueError(
                f"{method} scales RoPE positions, but layer {index} uses the {policy.name!r} policy; "
                f"apply {method} to RoPE (or RoPE/NoPE) models only"
            )
    return policies
