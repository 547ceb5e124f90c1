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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from repo_train.modeling import PositionPolicy, install_position_policies
from repo_train.modeling.scaling import ScaledRopePolicy, current_policies, scaled_policies

# LPES's policy is the core's scaled-RoPE policy (kept under this name for readers of the paper).
LayerScaledRopePolicy = ScaledRopePolicy


def apply_scales(model: nn.Module, scales: Sequence[float]) -> list[PositionPolicy]:
    """Give layer h positions / `scales[h]`; returns the previous policies (pass them to `restore_policies`).

    An earlier LPES scale is replaced, not multiplied; NoPE layers are kept;
    REPO and other non-RoPE policies are refused (see `scaled_policies`).
    """
    previous = current_policies(model)
    install_position_policies(model, scaled_policies(model, scales, method="LPES"))
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
