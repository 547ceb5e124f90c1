"""The untouched path equals HF's OLMo-2; REPO equals the paper's equations."""

import pytest
import torch
from float_checks import assert_close_to_scale
from reference_olmo2_repo import forward_logits
from transformers import Olmo2Config, Olmo2ForCausalLM

from repo_train import RePoOlmo2ForCausalLM
from repo_train.modeling import layer_plan, layer_policies
from repo_train.modeling.presets import tiny


def _hf_twin(model: RePoOlmo2ForCausalLM) -> Olmo2ForCausalLM:
    """transformers' own OLMo-2 with the same weights (REPO weights dropped)."""
    fields = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "architectures")}
    for key in ("position_method", "repo_start_layer", "repo_hidden_size"):
        fields.pop(key)
    ref = Olmo2ForCausalLM(Olmo2Config(**fields)).eval()
    missing, unexpected = ref.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(
        k.endswith(("gate_map.weight", "content_map.weight", "final_map.weight")) for k in unexpected
    )
    return ref


def _spread_repo_positions(model):
    """Re-draw the predictor so positions span tens of units (at init they sit near 0): rotations then matter."""
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            if hasattr(attn, "final_map"):
                for name, std in (("gate_map", 4.0), ("content_map", 4.0), ("final_map", 1.0)):
                    weight = getattr(attn, name).weight
                    weight.normal_(0.0, std / weight.shape[1] ** 0.5)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_all_rope_matches_hf_olmo2(attn):
    model = RePoOlmo2ForCausalLM(tiny(position_method="rope")).eval()
    model.config._attn_implementation = attn
    ref = _hf_twin(model)
    ref.config._attn_implementation = attn
    ids = torch.randint(0, 256, (3, 37))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding in one row
    with torch.no_grad():
        for kwargs in ({}, {"attention_mask": mask}):
            assert_close_to_scale(model(ids, **kwargs).logits, ref(ids, **kwargs).logits, 1e-5, what="logits")
        if attn == "eager":  # the eager path really runs eager: full attention weights come back
            ours, theirs = model(ids, output_attentions=True), ref(ids, output_attentions=True)
            assert len(ours.attentions) == 4 and ours.attentions[0].shape == (3, 4, 37, 37)
            # probabilities: scale 1 by definition (a row sums to 1), whatever the largest weight happens to be
            assert_close_to_scale(ours.attentions[-1], theirs.attentions[-1], 1e-6, scale=1.0, what="attention")


def test_all_rope_matches_hf_with_yarn():
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}
    model = RePoOlmo2ForCausalLM(tiny(position_method="rope", rope_parameters=yarn)).eval()
    ref = _hf_twin(model)
    ids = torch.randint(0, 256, (2, 150))
    with torch.no_grad():
        assert_close_to_scale(model(ids).logits, ref(ids).logits, 1e-5, what="logits")


def test_repo_matches_paper_equations():
    """Logits and every layer's positions z against the reference written from the equations.

    Tolerances are relative to the scale of the values, because errors are: the float32 model and the
    reference (float32 matmuls in another order, float64 rotation) drift apart by a few ulps per layer, and
    the drift grows through the layers because the spread positions are large (|z| up to ~440 in layer 4: a
    relative error of 1e-6 there turns the fastest pair by 4e-4 rad). Measured on a 2-core AMD EPYC (AVX2, MKL)
    with 1 and 2 threads, MKL in its default and its CBWR=COMPATIBLE mode, ATen AVX2 and default kernels:
    max |Δz| / max |z| = 1.1e-6, 3.4e-6, 1.2e-5 in layers 2, 3, 4 (5.4e-3 at |z| = 441: the reason an absolute
    atol=1e-3 failed) and max |Δlogits| / max |logits| <= 1.1e-4 (logits span only ~0.6 at init). The factors
    below leave >= 16x headroom. A real bug stays far outside: measured with the predictor patched, a sign
    flip of z or a missing SiLU / gate gives Δz / scale >= 0.4 and Δlogits / scale >= 0.2; z scaled by 1.001
    gives 1.0e-3 (positions) and 2.8e-2 (logits); z shifted by +1 (invisible in the logits, RoPE being
    relative) gives 2.3e-3 in layer 4 and 1.3e-2 in layer 2.
    """
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo", num_hidden_layers=5, repo_start_layer=2)).eval()
    _spread_repo_positions(model)
    ids = torch.randint(0, 256, (2, 29))
    plan = layer_plan("repo", 5, 2)
    assert plan == ["rope", "rope", "repo", "repo", "repo"]
    state = {k: v.detach() for k, v in model.state_dict().items()}
    with torch.no_grad():
        out = model(ids, output_positions=True)
        expected, expected_pos = forward_logits(state, model.config, ids, plan, return_positions=True)
    assert_close_to_scale(out.logits, expected, 2e-3, what="logits")
    for layer in range(2, 5):
        z = out.positions[layer]
        assert z.shape == (2, 4, 29)
        assert_close_to_scale(z, expected_pos[layer], 2e-4, what=f"positions of layer {layer}")
        assert z.abs().max() > 5  # the check is meaningful: positions far from zero


def test_repo_positions_are_per_head_and_content_dependent():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    _spread_repo_positions(model)
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        z = model(ids, output_positions=True).positions[-1][0]
        z_other = model(torch.randint(0, 256, (1, 16)), output_positions=True).positions[-1][0]
    assert not torch.allclose(z[0], z[1])  # heads differ
    assert not torch.allclose(z, z_other)  # content decides


def test_repo_forced_to_linear_positions_equals_rope():
    repo = RePoOlmo2ForCausalLM(tiny(position_method="repo", repo_start_layer=0)).eval()
    _spread_repo_positions(repo)
    for policy in layer_policies(repo):
        policy.linear_mix = 1.0  # z <- 0·z + 1·i
    rope = _hf_twin(repo)
    ids = torch.randint(0, 256, (2, 41))
    with torch.no_grad():
        assert_close_to_scale(repo(ids).logits, rope(ids).logits, 1e-5, what="logits")


def test_curriculum_blend_matches_equations():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    _spread_repo_positions(model)
    for policy in layer_policies(model):
        if policy.name == "repo":
            policy.linear_mix = 0.3
    ids = torch.randint(0, 256, (2, 19))
    state = {k: v.detach() for k, v in model.state_dict().items()}
    plan = layer_plan("repo", 4, model.config.repo_start_layer)
    with torch.no_grad():
        expected = forward_logits(state, model.config, ids, plan, linear_mix=0.3)
        assert_close_to_scale(model(ids).logits, expected, 1e-4, what="logits")


@pytest.mark.parametrize("method", ["nope", "r2n1", "n2r1"])
def test_baselines_match_equations(method):
    model = RePoOlmo2ForCausalLM(tiny(position_method=method, num_hidden_layers=6)).eval()
    plan = layer_plan(method, 6)
    expected_plan = {
        "nope": ["nope"] * 6,
        "r2n1": ["rope", "rope", "nope"] * 2,
        "n2r1": ["nope", "nope", "rope"] * 2,
    }[method]
    assert plan == expected_plan
    ids = torch.randint(0, 256, (2, 23))
    state = {k: v.detach() for k, v in model.state_dict().items()}
    with torch.no_grad():
        out = model(ids, output_positions=True)
        assert_close_to_scale(out.logits, forward_logits(state, model.config, ids, plan), 1e-4, what="logits")
    for name, positions in zip(plan, out.positions):
        if name == "nope":
            assert positions is None
        else:
            assert torch.equal(positions, torch.arange(23.0).expand(2, 4, 23))


def test_gradients_reach_every_repo_matrix():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo", repo_start_layer=1)).train()
    ids = torch.randint(0, 256, (2, 33))
    loss = model(ids, labels=ids).loss
    loss.backward()
    for layer in model.model.layers[1:]:
        for name in ("gate_map", "content_map", "final_map"):
            grad = getattr(layer.self_attn, name).weight.grad
            assert grad is not None and grad.abs().sum() > 0, name
    assert not hasattr(model.model.layers[0].self_attn, "gate_map")
