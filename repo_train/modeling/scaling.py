"""Scaled positions: layer l sees token i at position i / s_l.

One policy serves Position Interpolation (one s for every layer) and LPES
(one s per layer, paper Eq. 2). Scaling acts on positions, not frequencies,
so it composes with any static rope type (base, YaRN, ...), and s = 1 gives
the untouched layer bit for bit.

One rule everywhere (PI, the `lpes` method, the LPES search): a scale
multiplies the scale a layer already has. `pi:scale=2+lpes:...` thus gives
layer l positions / (2 · s_l), and scaling an unscaled model (what the search
does for each candidate) is the same as setting the scales. A layer's scale
must end up within [MIN_SCALE, MAX_SCALE] (`check_scale`), and scaling a model
without any RoPE layer is refused (it would be a no-op reported as a result).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from repo_train.modeling.policy import NopePolicy, PositionPolicy, RopePolicy, Rotation, linear_positions
from repo_train.modeling.rope import RotaryEncoding
from repo_train.modeling.swapping import current_policies

#: The scales a layer may end up with: positions / s stays a position a RoPE model can read. Below 1/1000 a
#: 4,096-token prompt would reach position 4 million; above 1000 a 100,000-token prompt would span 100 positions,
#: and a scale of 1e300 puts every token at position 0. PI's and LPES's scales lie in [1, 32].
MIN_SCALE, MAX_SCALE = 1e-3, 1e3


def check_scale(scale: float, where: str = "a position scale") -> float:
    """`scale` as a float if it is finite and within [MIN_SCALE, MAX_SCALE]; else a one-line ValueError."""
    scale = float(scale)
    if not (math.isfinite(scale) and MIN_SCALE <= scale <= MAX_SCALE):
        raise ValueError(
            f"{where} must be a finite number within [{MIN_SCALE:g}, {MAX_SCALE:g}] (positions are divided by it), "
            f"got {scale!r}"
        )
    return scale


class ScaledRopePolicy(RopePolicy):
    """Identical to `RopePolicy(encoding)` except that token i gets position i / scale."""

    name = "scaled_rope"
    needs_encoding = True

    def __init__(self, encoding: RotaryEncoding, scale: float):
        if encoding is None:
            raise ValueError("ScaledRopePolicy needs the model's encoding: RotaryEncoding.from_config(config)")
        scale = check_scale(scale)
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
            policies.append(ScaledRopePolicy(encoding, check_scale(scale, f"{method}: layer {index}'s scale")))
        else:
            raise ValueError(
                f"{method} scales RoPE positions, but layer {index} uses the {policy.name!r} policy; "
                f"apply {method} to RoPE (or RoPE/NoPE) models only"
            )
    refuse_without_rope(current, method, "scales RoPE positions")
    return policies


def refuse_without_rope(current: Sequence[PositionPolicy], method: str, what: str, start_layer: int = 0) -> None:
    """Refuse a method that acts through RoPE (or token positions) on a model whose layers from `start_layer`
    are all NoPE: it would run and change nothing, and its results would read as "no effect" of the method."""
    layers = current[start_layer:]
    if all(isinstance(policy, NopePolicy) for policy in layers):
        which = f"{len(current)} layers" if start_layer == 0 else f"layers {start_layer}..{len(current) - 1}"
        raise ValueError(
            f"{method} {what}, but none of the model's {which} uses RoPE (all NoPE): it would change nothing; "
            f"evaluate a RoPE (or RoPE/NoPE) model, or leave {method} out"
        )
