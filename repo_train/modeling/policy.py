"""The position policy: the one extension point every method plugs into.

A policy answers, for one attention layer, the two questions of the design:
which real-valued position each token gets (per head where needed), and how
positions become rotations (a `RotaryEncoding`). Policies are plain objects,
not modules: whatever they learn (REPO's predictor) is registered on the
attention module itself, under the names the policy declares, so checkpoints
keep the published key layout and a policy can be swapped at evaluation time
without touching the state dict.

Adding a method = one file subclassing `PositionPolicy` plus `@register_policy`:
the registered name is then also a position method (`model.position: NAME`, that
policy in every layer). A trainable policy states, beside its rotation, the
modules it learns (`learned_modules`), how their fresh weights start
(`init_learned`), the FLOPs it adds to a layer (`training_flops_per_token`, for
MFU), the bytes it keeps for backward (`saved_bytes_per_token`, for the memory
plan), its options (`Options`, the `PositionConfig` class `model.position`
names) and its schedule (`on_train_step`); no other file needs a new branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from repo_common.registry import Registry
from repo_train.modeling.position_config import PositionConfig
from repo_train.modeling.rope import RotaryEncoding, apply_rotation


@dataclass
class Rotation:
    """What a policy hands the attention for one forward call: how to rotate q and k.

    Either `cos/sin [B, 1, S, head_dim]` (the model's shared RoPE tables,
    applied with HF's arithmetic) or an `encoding` with `positions [B, P, S]`,
    P = 1 or the number of query heads (policies with their own positions,
    rotated by `RotaryEncoding.rotate`). `positions` are also kept for analysis.
    """

    cos: torch.Tensor | None = None
    sin: torch.Tensor | None = None
    encoding: RotaryEncoding | None = None
    positions: torch.Tensor | None = None

    @classmethod
    def from_positions(cls, encoding: RotaryEncoding, positions: torch.Tensor) -> Rotation:
        return cls(encoding=encoding, positions=positions)

    def apply(self, query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated `(query, key)`; own positions rotate both with one cos/sin table."""
        if self.encoding is not None:
            return self.encoding.rotate(query, key, self.positions)
        return apply_rotation(query, self.cos, self.sin), apply_rotation(key, self.cos, self.sin)


@dataclass
class AttentionInput:
    """What a policy's `attention_input` hands the attention in place of the module's own projection.

    `query [B, H, S, D]`, `key`, `value [B, KVH, S, D]`: projected, not yet rotated (as the module's
    `_project_qkv` returns them); the layer rotates them with the policy's `Rotation`, stores key and value in
    the cache and attends. `finish`, when set, is applied to the attention's output rows `[B, S, H*D]` before
    `o_proj`, as `finish(output, rotation, attention_mask, attention_kwargs)`: a policy that needs a second
    attention pass for some rows (PositionalHidden's recomputed rows) runs it there.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    finish: Callable[..., torch.Tensor] | None = None

    @property
    def qkv(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.query, self.key, self.value


class PositionPolicy:
    """Base class. Subclasses set `name` and implement `rotation`."""

    name: str = "base"
    #: True when positions differ between heads of one layer (keys of GQA
    #: models are then expanded to one copy per query head, see attention.py).
    per_head: bool = False
    #: False when the policy never computes its own rotation (RoPE via the
    #: model's rotary module, NoPE), so any rope_type of the model is fine.
    needs_encoding: bool = True

    #: The policy's options: a `PositionConfig` dataclass (`position_config.py`) that `model.position` names with
    #: its fields, kept in config.json as `position_options`; None = the policy takes no options.
    Options: ClassVar[type | None] = None

    @classmethod
    def from_config(cls, config, encoding: RotaryEncoding | None) -> PositionPolicy:
        """Build the policy for a model config; `encoding` is the config's RoPE variant."""
        return cls()

    @classmethod
    def options_from(cls, config) -> Any:
        """The config's options as this policy's `Options`; a key it does not have is a one-line error."""
        if cls.Options is None:
            given = dict(getattr(config, "position_options", None) or {})
            if given:
                raise ValueError(f"position_options {sorted(given)}: position method {cls.name!r} takes no options")
            return None
        return cls.Options.from_model_config(config)

    def on_train_step(self, step: int) -> dict[str, float]:
        """The policy's schedule, called before every training step (global step `step`) by the training module;
        it returns values to log as `train/NAME`. The default has none."""
        return {}

    def learned_modules(self, config) -> dict[str, nn.Module]:
        """Modules this policy trains, registered on the attention under these names."""
        return {}

    def init_learned(self, name: str, module: nn.Module) -> None:
        """Give fresh weights to `learned_modules()[name]`: at model construction and for weights a checkpoint lacks.

        Use `torch.nn.init` functions: inside transformers' `post_init` they
        skip weights already loaded. The default is torch's own init of each
        submodule (`reset_parameters`); parameters it cannot reach are an error
        rather than left as uninitialised memory.
        """
        bare = [
            f"{name}.{child}" if child else name
            for child, submodule in module.named_modules()
            if not hasattr(submodule, "reset_parameters")
            and next(submodule.parameters(recurse=False), None) is not None
        ]
        if bare:
            raise TypeError(
                f"position policy {self.name!r}: learned module(s) {bare} hold parameters without reset_parameters; "
                "override init_learned to start them"
            )
        for submodule in module.modules():
            if hasattr(submodule, "reset_parameters"):
                submodule.reset_parameters()

    def training_flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward + backward) per token this policy adds to its layer, beyond RoPE attention.

        What MFU counts for the policy (`accounting.training_flops_per_token`);
        0 for policies that only choose positions or tables.
        """
        return 0.0

    def saved_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes per token this policy makes autograd keep for backward in its layer, beyond RoPE attention's.

        What the training memory plan counts for the policy (`training.memory_plan`), as FLOPs are counted
        above; `dtype_bytes` is the size of the model's floats (2 for bf16). 0 for policies that only choose
        positions or tables.
        """
        return 0

    def rotation(
        self,
        attention: nn.Module,
        hidden_states: torch.Tensor,
        position_ids: torch.Tensor,
        shared: tuple[torch.Tensor, torch.Tensor] | None,
        record: bool,
    ) -> Rotation | None:
        """Return the layer's rotation, or None to leave q/k unrotated (NoPE).

        `hidden_states [B, S, d]` is the input of the attention sub-layer,
        `position_ids [B, S]` the token indices (offset by the cache length
        during generation), `shared` the model's own `(cos, sin) [B, S, D]`
        for those ids, and `record` asks for `Rotation.positions`.
        """
        raise NotImplementedError

    def attention_input(
        self, attention: nn.Module, hidden_states: torch.Tensor, position_ids: torch.Tensor, past_key_values
    ) -> AttentionInput | None:
        """The layer's projected q/k/v when the policy changes what forms them, else None (the default: the module
        projects `hidden_states [B, S, d]` as HF does).

        `position_ids [B, S]` are the tokens' indices (as for `rotation`), `past_key_values` the cache this forward
        appends to (None without one).
        """
        return None

    def attend(
        self,
        attention: nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """The layer's attention output `[B, S_q, H, D]` computed by the policy itself, or None (the default) for
        the model's attention interface (SDPA, flash-attn, eager).

        `query [B, H, S_q, D]` is rotated by this policy's `rotation`; `key`, `value` `[B, KVH, S_k, D]` hold the
        whole cache after this call's tokens were appended (keys rotated); `attention_mask` is what the
        interface would get (None, or `[B, 1, S_q, >= S_k]`, bool or additive). A policy that needs more than
        one query rotation per (query, key) pair overrides it (STRING, `string_policy.py`).
        """
        return None

    def describe(self) -> str:
        return self.name


#: Every position policy by its name (`position_method`, a layer plan's entries); `register_policy` adds each.
POSITION_POLICIES: Registry[type[PositionPolicy]] = Registry("position policy")


def register_policy(cls: type[PositionPolicy]) -> type[PositionPolicy]:
    """Class decorator: make a policy buildable by name."""
    if cls.Options is not None and not (issubclass(cls.Options, PositionConfig) and cls.Options.method == cls.name):
        raise TypeError(
            f"position policy {cls.name!r}: its Options must subclass repo_train.modeling.PositionConfig with "
            f"method = {cls.name!r} (the class `model.position` names)"
        )
    return POSITION_POLICIES.register(cls)


def linear_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """Token indices as float positions `[B, 1, S]`."""
    return position_ids[:, None, :].float()


@register_policy
class RopePolicy(PositionPolicy):
    """RoPE: position i for token i.

    With `encoding=None` the layer reuses the `(cos, sin)` the HF model already
    computed, so the untouched path runs HF's exact arithmetic.
    """

    name = "rope"
    needs_encoding = False

    def __init__(self, encoding: RotaryEncoding | None = None):
        self.encoding = encoding

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        positions = linear_positions(position_ids) if (record or self.encoding is not None) else None
        if self.encoding is None:
            if shared is None:
                raise ValueError("RopePolicy without its own encoding needs the model's position_embeddings")
            cos, sin = shared
            return Rotation(cos=cos.unsqueeze(1), sin=sin.unsqueeze(1), positions=positions)
        return Rotation.from_positions(self.encoding, positions)


@register_policy
class NopePolicy(PositionPolicy):
    """NoPE: no rotation at all (the same as giving every token one constant position)."""

    name = "nope"
    needs_encoding = False

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return None
