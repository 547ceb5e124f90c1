"""LPES policy: positions / s per layer (Eq. 2) on OLMo-2 and Llama; s = 1 leaves the model untouched; scales multiply."""

import copy

import pytest
import torch
from float_checks import assert_close_to_scale
from transformers import LlamaConfig, LlamaForCausalLM

from repo_train.modeling import (
    NopePolicy,
    RePoOlmo2ForCausalLM,
    RopePolicy,
    ScaledRopePolicy,
    install_position_policies,
    layer_policies,
    record_positions,
)
from repo_train.modeling.presets import tiny
from search.policy import scaled_model

LLAMA = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)


def _olmo():
    return RePoOlmo2ForCausalLM(tiny()).eval()


def _llama(**rope):
    config = LlamaConfig(**LLAMA, **({"rope_parameters": rope} if rope else {}))
    return LlamaForCausalLM(config).eval()


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("build", [_olmo, _llama], ids=["olmo2", "llama"])
def test_scale_one_is_bit_identical_to_the_untouched_model(build):
    model = build()
    untouched = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 23))
    layers = model.config.num_hidden_layers
    with scaled_model(model, [1.0] * layers):
        assert all(isinstance(p, ScaledRopePolicy) and p.scale == 1.0 for p in layer_policies(model))
        # exact: positions / 1.0 are the same floats, the tables equal HF's bit for bit, the rotation is elementwise
        assert torch.equal(_logits(model, ids), _logits(untouched, ids))
    assert all(type(p) is RopePolicy for p in layer_policies(model))


def test_scales_divide_the_positions_of_each_layer():
    model = _olmo()
    scales = [1.0, 2.0, 0.5, 1.7]
    with scaled_model(model, scales), torch.no_grad(), record_positions(model) as rec:
        model(torch.randint(0, 128, (2, 9)))
    for positions, scale in zip(rec.positions, scales):
        assert positions.shape == (2, 4, 9)
        assert torch.equal(positions, (torch.arange(9.0) / scale).expand(2, 4, 9))
    assert torch.equal(rec.positions[1], torch.arange(9.0).expand(2, 4, 9) / 2)  # scale 2 halves them


def test_uniform_scale_equals_hf_linear_rope_scaling():
    """An independent reference: HF's `linear` rope type divides the frequencies by the factor instead."""
    scaled = _llama()
    reference = _llama(rope_type="linear", factor=2.0, rope_theta=10000.0)
    reference.load_state_dict(scaled.state_dict())
    ids = torch.randint(0, 128, (1, 40))
    with scaled_model(scaled, [2.0, 2.0, 2.0]):
        # not exact: positions/2 times θ and positions times θ/2 round differently
        assert_close_to_scale(_logits(scaled, ids), _logits(reference, ids), 1e-5, what="logits")


def test_the_context_manager_gives_back_the_model():
    model = _llama()
    untouched = copy.deepcopy(model)
    ids = torch.randint(0, 128, (1, 30))
    with scaled_model(model, [1.3, 2.0, 1.1]):
        assert not torch.allclose(_logits(model, ids), _logits(untouched, ids))
    # exact: the original policies are back, so literally the untouched kernels
    assert torch.equal(_logits(model, ids), _logits(untouched, ids))
    with pytest.raises(KeyError), scaled_model(model, [2.0, 2.0, 2.0]):
        raise KeyError("a failing fitness evaluation")
    assert torch.equal(_logits(model, ids), _logits(untouched, ids))


def test_scales_multiply_an_earlier_scale():
    """The core's one rule: scaling a scaled layer multiplies (stacked PI/LPES); on an unscaled model it sets."""
    model = _olmo()
    with scaled_model(model, [2.0, 1.0, 0.5, 4.0]):
        with scaled_model(model, [1.5, 3.0, 2.0, 0.25]):
            assert [p.scale for p in layer_policies(model)] == [3.0, 3.0, 1.0, 1.0]
            with torch.no_grad(), record_positions(model) as rec:
                model(torch.randint(0, 128, (1, 7)))
        assert [p.scale for p in layer_policies(model)] == [2.0, 1.0, 0.5, 4.0]
    assert torch.equal(rec.positions[0], (torch.arange(7.0) / 3.0).expand(1, 4, 7))
    # exact: scale 1 · 1 = 1, so layers 2 and 3 run positions / 1.0 like the unscaled model
    assert torch.equal(rec.positions[3], torch.arange(7.0).expand(1, 4, 7))


def test_nope_layers_are_kept_and_other_policies_refused():
    model = _llama()
    install_position_policies(model, [NopePolicy(), RopePolicy(), RopePolicy()])
    with scaled_model(model, [2.0, 2.0, 2.0]):
        policies = layer_policies(model)
    assert isinstance(policies[0], NopePolicy) and isinstance(policies[1], ScaledRopePolicy)
    repo = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    with pytest.raises(ValueError, match="layer 1 uses the 'repo' policy"), scaled_model(repo, [1.0] * 4):
        pass


def test_clear_errors():
    model = _llama()
    with pytest.raises(ValueError, match="got 2 scales for a model with 3 layers"), scaled_model(model, [1.0, 1.0]):
        pass
    with pytest.raises(ValueError, match="finite number within"), scaled_model(model, [1.0, 0.0, 1.0]):
        pass
