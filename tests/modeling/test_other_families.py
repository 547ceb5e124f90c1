"""The same policy hook on Llama-, Qwen2-, Qwen3- and Mistral-style HF models (GQA included); other families
are refused before anything changes."""

import copy

import pytest
import torch
import transformers
from float_checks import assert_close_to_scale, assert_greedy
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from repo_train.modeling import (
    NopePolicy,
    RepoPolicy,
    RopePolicy,
    RotaryEncoding,
    install_position_policies,
    record_positions,
)
from repo_train.modeling.attention import UnsupportedModelError

SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA: two query heads per key/value head
    max_position_embeddings=512,
)


def _build(family: str):
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**SMALL)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**SMALL)).eval()


def _repo(config):
    return RepoPolicy(RotaryEncoding.from_config(config), config.hidden_size, 16, config.num_attention_heads)


#: Every supported family but OLMo-2 (tests/modeling/test_parity_and_equations.py): name -> model class.
SUPPORTED = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}
#: Families that look alike and are not supported: each would change under an all-RoPE policy, or fail.
REFUSED = {"cohere": "Cohere", "gemma2": "Gemma2", "stablelm": "StableLm", "glm": "Glm"}


def _build_family(prefix: str):
    config = getattr(transformers, f"{prefix}Config")(**SMALL, head_dim=16, pad_token_id=0)
    return getattr(transformers, f"{prefix}ForCausalLM")(config).eval()


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_every_supported_family_is_bit_identical_under_rope_policies(family):
    model = _build_family(SUPPORTED[family])
    untouched = copy.deepcopy(model)
    install_position_policies(model, [RopePolicy() for _ in range(3)])
    ids = torch.randint(0, 128, (2, 19))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, untouched(ids).logits)


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_other_families_are_refused_in_one_line_and_left_unchanged(family):
    model = _build_family(REFUSED[family])
    before = {name: type(module) for name, module in model.named_modules()}
    with pytest.raises(UnsupportedModelError) as err:
        install_position_policies(model, [RopePolicy() for _ in range(3)])
    assert f"do not support model type {family!r}" in str(err.value) and "\n" not in str(err.value)
    assert "supported: OLMo-2, Llama, Qwen2, Qwen3, Mistral" in str(err.value)
    assert {name: type(module) for name, module in model.named_modules()} == before


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_all_rope_policies_leave_the_model_unchanged(family):
    model = _build(family)
    untouched = copy.deepcopy(model)
    install_position_policies(model, [RopePolicy() for _ in range(3)])
    ids = torch.randint(0, 128, (2, 19))
    with torch.no_grad():  # exact: RopePolicy() hands back HF's own cos/sin, so the same kernels run in order
        assert torch.equal(model(ids).logits, untouched(ids).logits)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_repo_forced_linear_equals_rope_under_gqa(family):
    model = _build(family)
    untouched = copy.deepcopy(model)
    policies = [RopePolicy(), _repo(model.config), _repo(model.config)]
    install_position_policies(model, policies)
    for policy in policies[1:]:
        policy.linear_mix = 1.0
    ids = torch.randint(0, 128, (2, 19))
    with torch.no_grad():
        assert_close_to_scale(model(ids).logits, untouched(ids).logits, 1e-5, what="logits")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_repo_and_nope_on_gqa_decode_with_cache(family):
    model = _build(family)
    install_position_policies(model, [NopePolicy(), _repo(model.config), RopePolicy()])
    with torch.no_grad():
        for layer in model.model.layers[1:2]:
            layer.self_attn.final_map.weight.normal_(0.0, 20.0)
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad(), record_positions(model) as rec:
        model(ids)
    assert rec.positions[0] is None
    assert rec.positions[1].shape == (1, 4, 12) and rec.positions[1].abs().max() > 0.5
    assert torch.equal(rec.positions[2], torch.arange(12.0).expand(1, 4, 12))
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
        full = model(generated).logits
    assert_greedy(full[:, 11:-1], generated[:, 12:])  # cached greedy = argmax of the recomputation, up to near-ties
    # The REPO layer caches keys expanded to every query head (documented memory cost).
    assert model.model.layers[1].self_attn.num_key_value_groups == 1
    assert model.model.layers[2].self_attn.num_key_value_groups == 2


def test_policy_count_must_match_layers():
    model = _build("llama")
    with pytest.raises(ValueError, match="got 2 position policies for a model with 3 layers"):
        install_position_policies(model, [RopePolicy(), RopePolicy()])
