"""LPES as a position policy: layer h sees positions `position_ids / s_h` (paper Eq. 2).

Identical to `RopePolicy(encoding)` except that token i gets position i / s
in this layer; the encoding (base, YaRN, …) is the model's own, so s = 1
reproduces the untouched layer bit for bit. Scaling acts on the positions,
not on the frequencies, so the rotation of any static rope type is scaled
the same way.

`apply_scales(model, scales)` installs one such policy per layer on any model
the policy hook supports (OLMo-2, Llama, Qwen2, Qwen3, Mistral) and returns
the policies it replaced, so a search can score many scale vectors on one
loaded model and restore it afterwards (`restore_policies` or the
`scaled_model` context manager).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from repo_train.modeling import (
    NopePolicy,
    PositionPolicy,
    RopePolicy,
    RotaryEncoding,
    Rotation,
    attention_modules,
    install_position_policies,
    layer_policies,
)
from repo_train.modeling.policy import linear_positions


class LayerScaledRopePolicy(RopePolicy):
    """Identical to `RopePolicy(encoding)` except that positions are divided by `scale` (Eq. 2)."""

    name = "lpes_scaled_rope"
    needs_encoding = True

    def __init__(self, encoding: RotaryEncoding, scale: float):
        if encoding is None:
            raise ValueError("LayerScaledRopePolicy needs the model's encoding: RotaryEncoding.from_config(config)")
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"an LPES scale must be a finite number > 0, got {scale!r}")
        super().__init__(encoding)
        self.scale = scale

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return Rotation.from_positions(self.encoding, linear_positions(position_ids) / self.scale)

    def describe(self) -> str:
        return f"{self.name}(1/{self.scale:g})"


def current_policies(model: nn.Module) -> list[PositionPolicy]:
    """The installed policy of every layer; a model without the hook is made all-RoPE first (same outputs)."""
    try:
        return layer_policies(model)
    except AttributeError:
        policies: list[PositionPolicy] = [RopePolicy() for _ in attention_modules(model)]
        install_position_policies(model, policies)
        return policies


def apply_scales(model: nn.Module, scales: Sequence[float]) -> list[PositionPolicy]:
    """Give layer h positions / `scales[h]`; returns the previous policies (pass them to `restore_policies`).

    RoPE layers (plain or already LPES-scaled) get `LayerScaledRopePolicy` with
    their own encoding; the scale replaces, not multiplies, an earlier LPES
    scale. NoPE layers have no positions to scale and are kept as they are.
    Any other policy (REPO, …) is refused.
    """
    attns = attention_modules(model)
    if len(scales) != len(attns):
        raise ValueError(
            f"got {len(scales)} scales for a model with {len(attns)} layers: "
            "use the scale file searched for this model (one scale per layer)"
        )
    previous = current_policies(model)
    default_encoding: RotaryEncoding | None = None
    policies: list[PositionPolicy] = []
    for index, (policy, scale) in enumerate(zip(previous, scales)):
        if isinstance(policy, NopePolicy):
            policies.append(policy)
        elif type(policy) in (RopePolicy, LayerScaledRopePolicy):
            encoding = policy.encoding
            if encoding is None:
                default_encoding = default_encoding or RotaryEncoding.from_config(model.config)
                encoding = default_encoding
            policies.append(LayerScaledRopePolicy(encoding, scale))
        else:
            raise ValueError(
                f"LPES scales RoPE positions, but layer {index} uses the {policy.name!r} policy; "
                "apply LPES to RoPE (or RoPE/NoPE) models only"
            )
    install_position_policies(model, policies)
    return previous


def restore_policies(model: nn.Module, previous: Sequence[PositionPolicy]) -> None:
    """Undo `apply_scales`: reinstall the policies it returned."""
    install_position_policies(model, list(previous))


@contextmanager
def scaled_model(model: nn.Module, scales: Sequence[float]) -> Iterator[nn.Module]:
    """`with scaled_model(model, scales): …` scores the model under LPES scales and restores it afterwards."""
    previous = apply_scales(model, scales)
    try:
        yield model
    finally:
        restore_policies(model, previous)
