"""Swap a model's position policies for a while, then put the old ones back.

Training-free methods (PI, LPES, PCD's second forward, the LPES search's
candidates) change a loaded model only by installing other policies; this is
the one way they do it. Restoring reinstalls the very policy objects that were
there, so the restored model runs exactly the kernels it ran before, and
learned weights (REPO's predictors) stay registered throughout.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from repo_train.modeling.attention import attention_modules, install_position_policies, layer_policies
from repo_train.modeling.policy import PositionPolicy, RopePolicy


def current_policies(model: nn.Module) -> list[PositionPolicy]:
    """The installed policy of every layer; a model without the hook is made all-RoPE first (same outputs)."""
    try:
        return layer_policies(model)
    except AttributeError:
        policies: list[PositionPolicy] = [RopePolicy() for _ in attention_modules(model)]
        install_position_policies(model, policies)
        return policies


def swap_policies(model: nn.Module, policies: Sequence[PositionPolicy]) -> list[PositionPolicy]:
    """Install `policies` (one per layer); returns the previous ones, for `restore_policies`."""
    previous = current_policies(model)
    install_position_policies(model, list(policies))
    return previous


def restore_policies(model: nn.Module, previous: Sequence[PositionPolicy]) -> None:
    """Undo `swap_policies`: reinstall the policies it returned."""
    install_position_policies(model, list(previous))


@contextmanager
def swapped_policies(model: nn.Module, policies: Sequence[PositionPolicy]) -> Iterator[nn.Module]:
    """`with swapped_policies(model, policies): ...` runs the block under `policies`, restoring them even on errors."""
    previous = swap_policies(model, policies)
    try:
        yield model
    finally:
        restore_policies(model, previous)
