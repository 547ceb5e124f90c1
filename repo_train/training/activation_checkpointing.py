"""Activation checkpointing: which parts of the decoder recompute their activations in the backward pass.

`model.activation_checkpointing` takes one of (`checkpoint_plan` reads it):

    false       nothing is recomputed (fastest, most memory)
    true        every decoder layer (only its input is kept); the same as `every_1`
    every_K     every K-th decoder layer (layers K-1, 2K-1, ...: 1-based multiples of K, as torchtitan's
                `selective_ac_option`), the others keep their activations: between false and true in memory and time
    attention   the self-attention block of every layer (q/k/v/o, REPO's predictor and the rotation, attention)
    mlp         the MLP of every layer (its 2 × intermediate_size wide activations are the largest part)

A chosen module's `forward` runs under `torch.utils.checkpoint.checkpoint(use_reentrant=False)`: the wrapper is
a bound method set as the module's own `forward` attribute, so the state dict, the class (FSDP and `_no_split_modules` see `Olmo2DecoderLayer`) and
module hooks (outside `forward`, as transformers' own checkpointing keeps them) are unchanged, and keyword
arguments (position embeddings, attention mask, position ids) reach the module as given. It recomputes only
while training with gradients and without a KV cache (a replay would write the cache twice), as transformers'
`GradientCheckpointingLayer` does. A layer compiled afterwards (`regional_compile`) traces the checkpoint into
its graph.
"""

from __future__ import annotations

import functools
import re
import types
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

#: The accepted values, as error lines and docs name them.
ACCEPTED = (
    "true (every decoder layer), false, every_K with K >= 1 (every K-th layer), attention or mlp (that block of "
    "every layer)"
)
#: The parts of a decoder layer one value selects, by attribute name ("" = the whole layer).
PARTS = {"attention": "self_attn", "mlp": "mlp"}
_EVERY = re.compile(r"every_([1-9][0-9]*)")


@dataclass(frozen=True)
class CheckpointPlan:
    """What to recompute: `part` ("" = the whole layer, "self_attn", "mlp") of every `every`-th decoder layer."""

    every: int = 1
    part: str = ""


def checkpoint_plan(value: bool | str, option: str = "activation_checkpointing") -> CheckpointPlan | None:
    """The plan `value` selects (None = no checkpointing); anything else is a ValueError in one line naming `option`.

    Strings are exact (lower case); "true"/"false" come as bools from the parser and YAML but are taken as
    strings too (a value typed in Python). `every_1` is `true`; an `every_K` with K above the layer count
    selects no layer.
    """
    if value is False or value == "false":
        return None
    if value is True or value == "true":
        return CheckpointPlan()
    if isinstance(value, str):
        if value in PARTS:
            return CheckpointPlan(part=PARTS[value])
        every = _EVERY.fullmatch(value)
        if every:
            return CheckpointPlan(every=int(every.group(1)))
    raise ValueError(f"{option}: {value!r} is not valid; use {ACCEPTED}")


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (`model.model.layers`) or of the bare decoder (`model.layers`)."""
    root = model if hasattr(model, "layers") else getattr(model, "model", None)
    layers = getattr(root, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no decoder layers at .layers or .model.layers")
    return layers


def checkpointed_forward(self: nn.Module, *args, **kwargs):
    """The class's `forward` of `self` under non-reentrant checkpointing; bound to a chosen module as its `forward`.

    A plain function bound per module (not an object per module), so a compiled layer is not guarded on the
    wrapper's identity: layers alike share one graph. The class's `forward` is looked up at call time, so a
    class swap later (FSDP2's `FSDP<Layer>`) keeps working.
    """
    forward = functools.partial(type(self).forward, self)
    cache = kwargs.get("past_key_values", kwargs.get("cache"))
    if not (self.training and torch.is_grad_enabled()) or cache is not None:
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def is_checkpointed(module: nn.Module) -> bool:
    """Whether `module`'s forward is `checkpointed_forward` (set by `enable_activation_checkpointing`)."""
    forward = module.__dict__.get("forward")
    return isinstance(forward, types.MethodType) and forward.__func__ is checkpointed_forward


def checkpointed_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of `model` whose forward is checkpointed, in module order."""
    return [module for module in model.modules() if is_checkpointed(module)]


def recomputed_parts(value: bool | str, layers: int) -> list[str | None]:
    """Per decoder layer, what `value` recomputes: None (nothing), "" (the whole layer) or the attribute name of
    the part ("self_attn", "mlp"). What `enable_activation_checkpointing` wraps and the memory plan counts."""
    plan = checkpoint_plan(value)
    return [None if plan is None or (index + 1) % plan.every else plan.part for index in range(layers)]


def enable_activation_checkpointing(model: nn.Module, value: bool | str = True) -> list[nn.Module]:
    """Checkpoint the modules `value` selects (see the module doc); returns them. Idempotent; `false` does nothing."""
    layers = decoder_layers(model)
    chosen = []
    for layer, part in zip(layers, recomputed_parts(value, len(layers)), strict=True):
        if part is None:
            continue
        module = getattr(layer, part) if part else layer
        if not is_checkpointed(module):
            module.forward = types.MethodType(checkpointed_forward, module)
        chosen.append(module)
    return chosen
