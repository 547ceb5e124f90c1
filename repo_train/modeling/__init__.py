"""The positional core: position policies on HF RoPE decoders, and REPO on OLMo-2.

The names below are re-exported lazily (module `__getattr__`): the first one used loads every module
listed in `_EXPORTS`, in order (registering the 'repo' policy and the Auto classes, as an eager import
did), while a command that only parses its options (`repo_train.modeling.presets.PRESETS` for `--help`)
loads neither torch nor transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

#: module -> the names re-exported from it; all of them are loaded together on first use of any name.
_EXPORTS = {
    "repo_train.modeling.attention": [
        "PolicyAttentionMixin",
        "attention_modules",
        "install_position_policies",
        "layer_policies",
        "record_positions",
    ],
    "repo_train.modeling.configuration": ["RePoOlmo2Config"],
    "repo_train.modeling.methods": [
        "LAYER_PLANS",
        "build_policies",
        "layer_plan",
        "resolve_position",
        "position_of_fields",
    ],
    "repo_train.modeling.olmo2": ["RePoCausalLMOutput", "RePoOlmo2ForCausalLM", "RePoOlmo2Model"],
    "repo_train.modeling.policy": ["POSITION_POLICIES", "NopePolicy", "PositionPolicy", "RopePolicy", "Rotation"],
    "repo_train.modeling.position_config": ["PositionConfig", "PositionMethod"],
    "repo_train.modeling.repo_policy": ["RepoPolicy", "RepoPosition", "repo_curriculum_mix"],
    "repo_train.modeling.rope": ["RotaryEncoding"],
    "repo_train.modeling.scaling": ["ScaledRopePolicy", "scaled_policies"],
    "repo_train.modeling.swapping": ["current_policies", "restore_policies", "swap_policies", "swapped_policies"],
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'repo_train.modeling' has no attribute {name!r}")
    for module, exported in _EXPORTS.items():
        loaded = importlib.import_module(module)  # heavy: keeps --help fast (torch, transformers)
        globals().update({key: getattr(loaded, key) for key in exported})
    return globals()[name]


__all__ = [
    "LAYER_PLANS",
    "POSITION_POLICIES",
    "NopePolicy",
    "PolicyAttentionMixin",
    "PositionConfig",
    "PositionMethod",
    "PositionPolicy",
    "RePoCausalLMOutput",
    "RePoOlmo2Config",
    "RePoOlmo2ForCausalLM",
    "RePoOlmo2Model",
    "RepoPolicy",
    "RepoPosition",
    "RopePolicy",
    "RotaryEncoding",
    "Rotation",
    "ScaledRopePolicy",
    "attention_modules",
    "build_policies",
    "current_policies",
    "install_position_policies",
    "layer_plan",
    "layer_policies",
    "position_of_fields",
    "record_positions",
    "repo_curriculum_mix",
    "resolve_position",
    "restore_policies",
    "scaled_policies",
    "swap_policies",
    "swapped_policies",
]
