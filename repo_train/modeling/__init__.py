"""The positional core: position policies on HF RoPE decoders, and REPO on OLMo-2."""

from repo_train.modeling.attention import (
    PolicyAttentionMixin,
    attention_modules,
    install_position_policies,
    layer_policies,
    record_positions,
)
from repo_train.modeling.configuration import RePoOlmo2Config
from repo_train.modeling.methods import LAYER_PLANS, build_policies, layer_plan
from repo_train.modeling.olmo2 import RePoCausalLMOutput, RePoOlmo2ForCausalLM, RePoOlmo2Model
from repo_train.modeling.policy import POSITION_POLICIES, NopePolicy, PositionPolicy, RopePolicy, Rotation
from repo_train.modeling.repo_policy import RepoPolicy, repo_curriculum_mix
from repo_train.modeling.rope import RotaryEncoding
from repo_train.modeling.scaling import ScaledRopePolicy, scaled_policies
from repo_train.modeling.swapping import current_policies, restore_policies, swap_policies, swapped_policies

__all__ = [
    "LAYER_PLANS",
    "POSITION_POLICIES",
    "NopePolicy",
    "PolicyAttentionMixin",
    "PositionPolicy",
    "RePoCausalLMOutput",
    "RePoOlmo2Config",
    "RePoOlmo2ForCausalLM",
    "RePoOlmo2Model",
    "RepoPolicy",
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
    "record_positions",
    "repo_curriculum_mix",
    "restore_policies",
    "scaled_policies",
    "swap_policies",
    "swapped_policies",
]
