"""The per-layer policy hook for HF RoPE attention modules.

`PolicyAttentionMixin.forward` is identical to the forward of transformers'
OLMo-2 / Llama / Qwen2 / Mistral / Qwen3 attention, except that the rotation
of q and k comes from `self.position_policy` instead of the model-wide
`position_embeddings`, and that the policy may hand its own projected q/k/v
(`PositionPolicy.attention_input`, default: none, the module projects as HF does).
Rotated q/k then go through the cache and the normal
attention interface (SDPA, flash-attn, eager), so no L×L tensor is built.

`install_position_policies(model, policies)` gives each attention module of a
loaded HF model its policy: it switches the module's class to a subclass that
mixes this forward in (no installed file, no class of transformers is
altered) and registers the policy's learned modules on it. Each such module
remembers the policy that declared it, so model code can start its weights
(`init_policy_module`) and count them (`policy_modules`) without knowing any
policy by name.

GQA: a per-head policy needs one key rotation per *query* head, so such a
layer stores keys and values expanded to all query heads (memory of K/V ×
num_heads / num_kv_heads for that layer) and runs as multi-head attention.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from repo_train.modeling.cache_keyword import given_cache
from repo_train.modeling.policy import PositionPolicy


class UnsupportedModelError(TypeError, ValueError):
    """A model whose attention position policies cannot hook (not an OLMo-2/Llama/Qwen/Mistral-style decoder).

    A TypeError (what it always was) and a ValueError, so command lines report
    it as a user's mistake: one line naming the model class and what is supported.
    """


def _expand_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """`[B, KVH, S, D]` -> `[B, KVH*groups, S, D]`, each kv head repeated for its query group."""
    if groups == 1:
        return x
    b, kvh, s, d = x.shape
    return x[:, :, None].expand(b, kvh, groups, s, d).reshape(b, kvh * groups, s, d)


class PolicyAttentionMixin:
    """Mixed in before a HF attention class; see the module docstring."""

    position_policy: PositionPolicy
    #: When a list, each forward appends the positions it used (`[B, H, S]` or None).
    position_record: list | None = None

    def _project_qkv(self, hidden_states: torch.Tensor):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states)
        k = self.k_proj(hidden_states)
        v = self.v_proj(hidden_states)
        q_norm = getattr(self, "q_norm", None)
        per_head_norm = q_norm is not None and q_norm.weight.shape[0] == self.head_dim
        if q_norm is not None and not per_head_norm:  # OLMo-2: norm over all heads at once
            q, k = q_norm(q), self.k_norm(k)
        q, k, v = (t.view(hidden_shape) for t in (q, k, v))
        if per_head_norm:  # Qwen3: norm within each head
            q, k = q_norm(q), self.k_norm(k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values=None,
        **kwargs,
    ):
        past_key_values = given_cache(past_key_values, kwargs)  # transformers >= 5.24 passes it as `cache`
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            past = past_key_values.get_seq_length(self.layer_idx) if past_key_values is not None else 0
            position_ids = torch.arange(past, past + hidden_states.shape[1], device=hidden_states.device)[None]
        if position_ids.shape[0] != hidden_states.shape[0]:
            position_ids = position_ids.expand(hidden_states.shape[0], -1)
        given = self.position_policy.attention_input(self, hidden_states, position_ids, past_key_values)
        query, key, value = self._project_qkv(hidden_states) if given is None else given.qkv

        record = self.position_record is not None
        rotation = self.position_policy.rotation(self, hidden_states, position_ids, position_embeddings, record)
        if self.position_policy.per_head:
            groups = self.config.num_attention_heads // self.config.num_key_value_heads
            key, value = _expand_heads(key, groups), _expand_heads(value, groups)
        if rotation is not None:
            query, key = rotation.apply(query, key)
        if record:
            positions = None
            if rotation is not None and rotation.positions is not None:
                positions = rotation.positions.expand(-1, query.shape[1], -1).detach()
            self.position_record.append(positions)

        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)

        # A policy that computes the attention itself (STRING's two passes) answers here; None = the interface.
        attn_output, attn_weights = self.position_policy.attend(self, query, key, value, attention_mask), None
        if attn_output is None:
            attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, _eager_attention_of(type(self))
            )
            sliding_window = getattr(self, "sliding_window", None)
            if sliding_window is not None:
                kwargs["sliding_window"] = sliding_window
            attn_output, attn_weights = attention_interface(
                self,
                query,
                key,
                value,
                attention_mask,
                dropout=0.0 if not self.training else self.attention_dropout,
                scaling=self.scaling,
                **kwargs,
            )
        attn_output = attn_output.reshape(*hidden_states.shape[:-1], -1).contiguous()
        if given is not None and given.finish is not None:
            attn_output = given.finish(attn_output, rotation, attention_mask, kwargs)
        return self.o_proj(attn_output), attn_weights


def _eager_attention_of(cls: type):
    """The `eager_attention_forward` of the HF modeling file the attention class comes from.

    "eager" is not in HF's attention registry: each modeling file defines its
    own (identical in shape) function, which the HF class passes as default.
    """
    for base in cls.__mro__:
        module = sys.modules.get(base.__module__)
        function = getattr(module, "eager_attention_forward", None)
        if function is not None:
            return function
    raise TypeError(f"{cls.__name__}: no eager_attention_forward found in its transformers modeling file")


_POLICY_CLASSES: dict[type, type] = {}


def _policy_class(attention_cls: type) -> type:
    """The (cached) subclass `Policy<Name>` of a HF attention class."""
    if issubclass(attention_cls, PolicyAttentionMixin):
        return attention_cls
    if attention_cls not in _POLICY_CLASSES:
        _POLICY_CLASSES[attention_cls] = type(
            f"Policy{attention_cls.__name__}", (PolicyAttentionMixin, attention_cls), {"__module__": __name__}
        )
    return _POLICY_CLASSES[attention_cls]


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention module of each decoder layer, in layer order."""
    root = model
    for attr in ("model", "decoder"):
        if hasattr(root, "layers"):
            break
        root = getattr(root, attr, root)
    layers = getattr(root, "layers", None)
    if layers is None or not all(hasattr(layer, "self_attn") for layer in layers):
        raise UnsupportedModelError(
            f"{type(model).__name__} does not look like a HF decoder with `model.layers[i].self_attn`; "
            "position policies support OLMo-2, Llama, Qwen2, Qwen3 and Mistral style models: use one of those."
        )
    return [layer.self_attn for layer in layers]


#: The HF model types whose untouched path under all-RoPE policies is bit-identical to HF's own model (a test
#: per family: tests/modeling/test_other_families.py, test_parity_and_equations.py). Others may look alike and
#: differ (Cohere and Gemma-2 rotate interleaved pairs or soft-cap scores; StableLM and GLM rotate part of each
#: head), so they are refused rather than silently changed.
SUPPORTED_MODEL_TYPES = {
    "olmo2": "OLMo-2",
    "repo_olmo2": "OLMo-2 with REPO",
    "llama": "Llama",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "mistral": "Mistral",
}
SUPPORTED_FAMILIES = "OLMo-2, Llama, Qwen2, Qwen3, Mistral"


def _check_supported(attn: nn.Module) -> None:
    model_type = getattr(getattr(attn, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"position policies do not support model type {model_type!r} ({type(attn).__name__}): its attention "
            f"is not checked to stay equal to HF's under RoPE policies; supported: {SUPPORTED_FAMILIES}"
        )
    needed = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "config", "layer_idx")
    missing = [name for name in needed if not hasattr(attn, name)]
    if missing:
        raise UnsupportedModelError(
            f"{type(attn).__name__} lacks {missing}: it is not a q/k/v/o RoPE attention this hook supports "
            f"({SUPPORTED_FAMILIES}): use a model of one of those families."
        )


#: Attribute set on every module a policy registered: `(policy, name)` of the policy that declared it.
_OWNER = "_position_policy_owner"


def policy_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Every module a position policy registered in `model`, by qualified name (e.g. REPO's `gate_map`s)."""
    return {name: module for name, module in model.named_modules() if hasattr(module, _OWNER)}


def init_policy_module(module: nn.Module) -> bool:
    """Start `module`'s weights with the `init_learned` of the policy that registered it; False for other modules."""
    owner = getattr(module, _OWNER, None)
    if owner is None:
        return False
    policy, name = owner
    with torch.no_grad():
        policy.init_learned(name, module)
    return True


def install_position_policies(model: nn.Module, policies: Sequence[PositionPolicy], init_new: bool = True) -> None:
    """Give layer i the policy `policies[i]`; registers learned modules and (optionally) starts new ones.

    Learned modules already present under the same names with the same shapes
    are kept, so swapping between policies that share a predictor is free.
    New ones start through their policy's `init_learned` (with `init_new`;
    model classes pass False and start them in `post_init` instead).
    """
    attns = attention_modules(model)
    policies = list(policies)
    if len(policies) != len(attns):
        raise ValueError(f"got {len(policies)} position policies for a model with {len(attns)} layers")
    # Everything is checked (and every new module built) before the first layer changes, so a refused call
    # leaves the model as it was.
    learned: list[dict[str, nn.Module]] = []
    for index, (attn, policy) in enumerate(zip(attns, policies, strict=True)):
        _check_supported(attn)
        if not isinstance(policy, PositionPolicy):
            raise TypeError(
                f"policies[{index}] is {policy!r} ({type(policy).__name__}), not a PositionPolicy: build the list "
                "with repo_train.modeling.methods.build_policies(config) or policy classes; the model is unchanged"
            )
        learned.append(policy.learned_modules(attn.config))
    for attn, policy, modules in zip(attns, policies, learned, strict=True):
        attn.__class__ = _policy_class(type(attn))
        attn.position_policy = policy
        # Keys/values of a per-head layer are already expanded to every query head.
        groups = attn.config.num_attention_heads // attn.config.num_key_value_heads
        attn.num_key_value_groups = 1 if policy.per_head else groups
        for name, module in modules.items():
            current = getattr(attn, name, None)
            if isinstance(current, nn.Module) and all(
                a.shape == b.shape for a, b in zip(current.parameters(), module.parameters())
            ):
                setattr(current, _OWNER, (policy, name))
                continue
            setattr(module, _OWNER, (policy, name))
            ref = attn.q_proj.weight
            if ref.device.type != "meta":
                module = module.to(device=ref.device, dtype=ref.dtype)
                if init_new:
                    init_policy_module(module)
            attn.add_module(name, module)


def layer_policies(model: nn.Module) -> list[PositionPolicy]:
    """The policy of each layer (a model without installed policies raises)."""
    return [attn.position_policy for attn in attention_modules(model)]


class record_positions:
    """Context manager: collect the positions every layer used in the forwards inside it.

    `with record_positions(model) as rec: model(ids)` then `rec.positions` is a
    list (one entry per layer and forward call) of `[B, H, S]` tensors, None
    for unrotated (NoPE) layers.
    """

    def __init__(self, model: nn.Module):
        self.attns = attention_modules(model)
        self.positions: list[torch.Tensor | None] = []

    def __enter__(self):
        for attn in self.attns:
            attn.position_record = []
        return self

    def __exit__(self, *exc):
        per_layer = [attn.position_record for attn in self.attns]
        for attn in self.attns:
            attn.position_record = None
        # Interleave: forward call c contributes one entry per layer, in layer order.
        calls = min((len(r) for r in per_layer), default=0)
        self.positions = [per_layer[layer][c] for c in range(calls) for layer in range(len(self.attns))]
        return False
