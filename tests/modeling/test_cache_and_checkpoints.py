"""Generation with the KV cache, checkpoint round trips, published RePo layout, bad input."""

import json

import pytest
import torch
from float_checks import assert_close_to_scale, assert_greedy
from reference_olmo2_repo import forward_logits
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, Olmo2Config, Olmo2ForCausalLM

import repo_train  # noqa: F401  (registers the Auto classes)
from repo_train import RePoOlmo2Config, RePoOlmo2ForCausalLM
from repo_train.modeling import layer_plan
from repo_train.modeling.cache_keyword import cache_argument
from repo_train.modeling.presets import tiny

METHODS = ["rope", "nope", "r2n1", "n2r1", "repo"]
REPO_KEYS = ("gate_map.weight", "content_map.weight", "final_map.weight")


def _spread(model):
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer.self_attn, "final_map"):
                for name, std in (("gate_map", 4.0), ("content_map", 4.0), ("final_map", 1.0)):
                    weight = getattr(layer.self_attn, name).weight
                    weight.normal_(0.0, std / weight.shape[1] ** 0.5)


def _vanilla_fields(config) -> dict:
    fields = {
        k: v for k, v in config.to_dict().items() if k not in ("model_type", "architectures", "transformers_version")
    }
    for key in ("position_method", "repo_start_layer", "repo_hidden_size"):
        fields.pop(key, None)
    return fields


@pytest.mark.parametrize("method", METHODS)
def test_incremental_decoding_equals_recomputation(method):
    model = RePoOlmo2ForCausalLM(tiny(position_method=method, num_hidden_layers=6)).eval()
    _spread(model)
    ids = torch.randint(2, 256, (2, 21))
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=10, do_sample=False, min_new_tokens=10)
        full = model(generated).logits
        # Step-by-step decoding with an explicit cache gives the full-sequence logits.
        cache = DynamicCache(config=model.config)
        steps = [model(generated[:, :21], use_cache=True, **cache_argument(cache)).logits]
        for t in range(21, generated.shape[1]):
            steps.append(model(generated[:, t : t + 1], use_cache=True, **cache_argument(cache)).logits)
    cached = torch.cat(steps, dim=1)
    # spread REPO positions (tens to hundreds) amplify float32 drift: 2.1e-5 of the scale measured with "repo"
    assert_close_to_scale(cached, full, 5e-4, what="cached vs recomputed logits")
    # Greedy tokens are the argmax of the recomputed logits (up to a float near-tie between two tokens).
    assert_greedy(full[:, 20:-1], generated[:, 21:])


def test_save_and_auto_load_round_trip(tmp_path):
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    _spread(model)
    model.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, RePoOlmo2Config) and config.position_method == "repo"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, RePoOlmo2ForCausalLM)
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    ids = torch.randint(0, 256, (2, 17))
    with torch.no_grad():  # exact: the same weights through the same kernels in the same order
        assert torch.equal(model(ids).logits, loaded(ids).logits)


def test_vanilla_olmo2_checkpoint_loads_into_repo(tmp_path):
    vanilla = Olmo2ForCausalLM(Olmo2Config(**_vanilla_fields(tiny()))).eval()
    vanilla.save_pretrained(tmp_path)
    model = RePoOlmo2ForCausalLM.from_pretrained(tmp_path, position_method="repo", repo_start_layer=1)
    assert model.config.position_method == "repo" and model.config.repo_start_layer == 1
    state = model.state_dict()
    for key, value in vanilla.state_dict().items():
        assert torch.equal(value, state[key]), key
    repo_weights = [v for k, v in state.items() if k.endswith(REPO_KEYS)]
    assert len(repo_weights) == 3 * 3
    for weight in repo_weights:  # fresh OLMo init: N(0, 0.02) truncated at 3 std
        assert weight.abs().max() <= 0.06 + 1e-7
        assert 0.012 < weight.std().item() < 0.025
    # RoPE layers below the start layer are untouched: with p=1 the model is the vanilla one.
    for attn in model.model.layers:
        if hasattr(attn.self_attn, "final_map"):
            attn.self_attn.position_policy.linear_mix = 1.0
    ids = torch.randint(0, 256, (1, 15))
    with torch.no_grad():
        assert_close_to_scale(model(ids).logits, vanilla(ids).logits, 1e-5, what="logits")


def _write_published(tmp_path, start_layer=2, mode="swigluex_multihead", misspelt=True):
    """A directory in the published RePo layout: OLMo-2 config + pe_config, REPO weights under self_attn."""
    config = tiny(num_hidden_layers=5)
    d, d_p, heads = config.hidden_size, config.hidden_size // 8, config.num_attention_heads
    vanilla = Olmo2ForCausalLM(Olmo2Config(**_vanilla_fields(config)))
    state = {k: v.detach().clone().contiguous() for k, v in vanilla.state_dict().items()}
    for i in range(start_layer, 5):
        prefix = f"model.layers.{i}.self_attn."
        state[prefix + "gate_map.weight"] = torch.randn(d_p, d) * 4 / d**0.5
        state[prefix + "content_map.weight"] = torch.randn(d_p, d) * 4 / d**0.5
        state[prefix + "final_map.weight"] = torch.randn(heads, d_p) / d_p**0.5
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    cfg = _vanilla_fields(config)
    cfg.update(model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    key = "dynmaic_pe_start_layer" if misspelt else "dynamic_pe_start_layer"
    cfg["pe_config"] = {"dynamic_pe_mode": mode, key: start_layer}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return state, config


@pytest.mark.parametrize("misspelt", [True, False])
def test_published_repo_layout_loads_and_matches_equations(tmp_path, misspelt):
    state, config = _write_published(tmp_path, misspelt=misspelt)
    model = RePoOlmo2ForCausalLM.from_pretrained(tmp_path).eval()
    assert model.config.position_method == "repo" and model.config.repo_start_layer == 2
    for key, value in state.items():
        assert torch.equal(model.state_dict()[key], value), key
    ids = torch.randint(0, 256, (2, 25))
    with torch.no_grad():
        expected = forward_logits(state, config, ids, layer_plan("repo", 5, 2))
        # large REPO positions amplify float32 drift, as in test_repo_matches_paper_equations: measured 5.2e-5
        assert_close_to_scale(model(ids).logits, expected, 2e-3, what="logits")


def test_unknown_published_mode_is_a_clear_error(tmp_path):
    _write_published(tmp_path, mode="swigluex_posdim")
    with pytest.raises(ValueError, match="dynamic_pe_mode='swigluex_posdim' is not supported"):
        RePoOlmo2ForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"position_method": "alibi"}, "unknown position_method 'alibi'"),
        ({"position_method": "repo", "repo_start_layer": 4}, r"repo_start_layer must be an integer in \[0, 3\]"),
        ({"position_method": "repo", "repo_start_layer": -1}, "repo_start_layer must be"),
        ({"position_method": "repo", "repo_hidden_size": 0}, "repo_hidden_size"),
        ({"position_method": "repo", "repo_hidden_size": 65}, "repo_hidden_size"),
        ({"position_method": "repo", "repo_hidden_size": 8.5}, "repo_hidden_size"),
    ],
)
def test_bad_position_config_fails_clearly(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_dynamic_rope_refused_for_repo_layers():
    dynamic = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    RePoOlmo2ForCausalLM(tiny(position_method="rope", rope_parameters=dynamic))  # untouched path: fine
    with pytest.raises(ValueError, match="changes its frequencies with the input length"):
        RePoOlmo2ForCausalLM(tiny(position_method="repo", rope_parameters=dynamic))


def test_generate_with_left_padding_uses_cumsum_positions():
    """`generate` must see `position_ids`/`logits_to_keep` in forward's signature: a left-padded row's
    first real token then sits at position 0 (HF's cumsum rule) and decodes like the prompt alone."""
    from repo_train.modeling import record_positions

    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    _spread(model)
    short, long = torch.randint(3, 256, (1, 9)), torch.randint(3, 256, (1, 14))
    batch = torch.full((2, 14), model.config.pad_token_id)
    batch[0, 5:], batch[1] = short[0], long[0]
    mask = (torch.arange(14) >= torch.tensor([[5], [0]])).long()
    with torch.no_grad(), record_positions(model) as rec:
        together = model.generate(batch, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    prefill_rope = rec.positions[0]  # layer 0 (RoPE) of the prefill call
    assert prefill_rope[0, 0, 5].item() == 0.0 and prefill_rope[1, 0, 0].item() == 0.0
    # The padded row decodes like the prompt alone: its new tokens are the greedy choices of an unpadded
    # forward over the prompt and those tokens. (Not `generate(short)` token for token: padded and unpadded
    # attention are different float paths, so a near-tie between two logits could pick either.)
    with torch.no_grad():
        unpadded = model(together[:1, 5:]).logits
    assert_greedy(unpadded[:, 8:-1], together[:1, 14:])
