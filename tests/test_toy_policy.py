"""The extension points, used as a newcomer would: a trainable policy and a training-free calibrator.

The policy is one class plus one registry line, written here; the calibrator is the user's example
(`examples/extension/clamp_calibrator.py`, also run through its command in
tests/test_extension_from_outside.py). If any test below needed an edit in the project's packages, the
interface would be incomplete: FLOPs (MFU), weight init, loading, training, cached decoding and the
harness's method stack all have to take the new classes as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from float_checks import assert_close_to_scale, assert_greedy
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from evaluation.generation import DecodeSettings, collate, generate_batch, tokenize_prompts
from evaluation.methods import Method, MethodStack
from evaluation.model_loading import tiny_default
from examples.extension.clamp_calibrator import ClampedRopePolicy
from repo_train.modeling import (
    PositionPolicy,
    RePoOlmo2ForCausalLM,
    RotaryEncoding,
    Rotation,
    build_policies,
    install_position_policies,
    layer_policies,
    record_positions,
)
from repo_train.modeling.accounting import parameter_report, training_flops_per_token
from repo_train.modeling.cache_keyword import cache_argument
from repo_train.modeling.policy import linear_positions, register_policy
from repo_train.modeling.presets import tiny

#: log of the per-head scale every fresh toy weight starts at (the init hook's value).
START = math.log(0.5)


class HeadLogScale(nn.Module):
    """One learned number a_h per head."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.log_scale = nn.Parameter(torch.empty(num_heads))


@register_policy
class HeadScalePolicy(PositionPolicy):
    """Toy trainable policy: head h sees token i at position i · exp(a_h), a_h learned."""

    name = "test_head_scale"
    per_head = True

    def __init__(self, encoding: RotaryEncoding, num_heads: int):
        self.encoding = encoding
        self.num_heads = num_heads

    @classmethod
    def from_config(cls, config, encoding):
        return cls(encoding or RotaryEncoding.from_config(config), config.num_attention_heads)

    def learned_modules(self, config):
        return {"head_log_scale": HeadLogScale(self.num_heads)}

    def init_learned(self, name, module):
        nn.init.constant_(module.log_scale, START)

    def training_flops_per_token(self, seq_len):
        return 3.0 * self.num_heads  # one multiply per head and token, forward + backward

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        scales = attention.head_log_scale.log_scale.float().exp()
        return Rotation.from_positions(self.encoding, linear_positions(position_ids) * scales[None, :, None])


def _toy(**overrides):
    return tiny(position_method="test_head_scale", **overrides)


def _spread_scales(model):
    """Distinct scales per head (0.5, 1, 1.5, 2), so heads really differ."""
    with torch.no_grad():
        for attn in (layer.self_attn for layer in model.model.layers):
            attn.head_log_scale.log_scale.copy_(torch.tensor([0.5, 1.0, 1.5, 2.0]).log())


def test_the_registered_name_is_a_position_method_whose_flops_and_parameters_are_counted():
    config = _toy()
    assert all(isinstance(p, HeadScalePolicy) for p in build_policies(config))
    seq_len, layers, heads = 64, config.num_hidden_layers, config.num_attention_heads
    rope = training_flops_per_token(tiny(position_method="rope"), seq_len)
    assert training_flops_per_token(config, seq_len) - rope == layers * 3 * heads
    assert parameter_report(RePoOlmo2ForCausalLM(config)).position == layers * heads


def test_the_init_hook_starts_fresh_weights_and_loaded_ones_are_kept(tmp_path):
    model = RePoOlmo2ForCausalLM(_toy())
    for attn in (layer.self_attn for layer in model.model.layers):
        assert torch.equal(attn.head_log_scale.log_scale, torch.full((4,), START))
    # install_position_policies on another family starts them through the same hook
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    llama = LlamaForCausalLM(LlamaConfig(**small, num_key_value_heads=2))
    install_position_policies(llama, [HeadScalePolicy.from_config(llama.config, None) for _ in range(2)])
    for layer in llama.model.layers:
        assert torch.equal(layer.self_attn.head_log_scale.log_scale, torch.full((4,), START))
    # a saved model loads its own weights (the hook does not overwrite them) ...
    _spread_scales(model)
    model.save_pretrained(tmp_path / "toy")
    loaded = RePoOlmo2ForCausalLM.from_pretrained(tmp_path / "toy")
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    # ... and a RoPE checkpoint asked for the toy method gets fresh toy weights, the rest loaded
    rope = RePoOlmo2ForCausalLM(tiny(position_method="rope"))
    rope.save_pretrained(tmp_path / "rope")
    fresh = RePoOlmo2ForCausalLM.from_pretrained(tmp_path / "rope", position_method="test_head_scale")
    assert torch.equal(fresh.model.layers[0].self_attn.head_log_scale.log_scale, torch.full((4,), START))
    assert torch.equal(fresh.model.layers[0].self_attn.q_proj.weight, rope.model.layers[0].self_attn.q_proj.weight)


def test_weights_the_default_init_cannot_reach_are_an_error():
    with pytest.raises(TypeError, match=r"\['head_log_scale'\] hold parameters without reset_parameters; override"):
        PositionPolicy().init_learned("head_log_scale", HeadLogScale(4))
    linear = nn.Linear(4, 4)
    nn.init.zeros_(linear.weight)
    PositionPolicy().init_learned("map", linear)  # torch's own init reaches it
    assert linear.weight.abs().min() > 0


def test_a_model_with_the_toy_policy_trains():
    model = RePoOlmo2ForCausalLM(_toy()).train()
    ids = torch.randint(3, 256, (4, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    learned = torch.stack([layer.self_attn.head_log_scale.log_scale.detach() for layer in model.model.layers])
    assert not torch.equal(learned, torch.full_like(learned, START))  # the gradient reached the toy weights


def test_cached_decoding_equals_recomputation():
    model = RePoOlmo2ForCausalLM(_toy(num_hidden_layers=3)).eval()
    _spread_scales(model)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(4.0)  # wide greedy margins (tests/evaluation/conftest.py: spread_logits)
    ids = torch.randint(3, 256, (2, 15))
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
        full = model(generated).logits
        cache = DynamicCache(config=model.config)
        steps = [model(generated[:, :15], use_cache=True, **cache_argument(cache)).logits]
        for t in range(15, generated.shape[1]):
            steps.append(model(generated[:, t : t + 1], use_cache=True, **cache_argument(cache)).logits)
    assert_close_to_scale(torch.cat(steps, dim=1), full, 1e-5, what="cached vs recomputed logits")
    assert_greedy(full[:, 14:-1], generated[:, 15:])


@dataclass
class FirstLogits(Method):
    """Records the step-0 logits (not registered: a helper of this test)."""

    name: ClassVar[str] = "test_first_logits"

    def __post_init__(self):
        self.seen = []

    def process_logits(self, step, logits, state):
        if step == 0:
            self.seen.append(logits.clone())
        return logits


@pytest.mark.parametrize("limit", [3, 1000])
def test_the_harness_runs_a_toy_calibrator_and_restores_the_model(limit):
    model, tokenizer = tiny_default(seed=0)
    before = layer_policies(model)
    batch = collate(tokenize_prompts(tokenizer, ["a short prompt", "a somewhat longer second prompt"]), 0)
    stack = MethodStack.parse(f"clamp:limit={limit}")
    assert stack.label == f"clamp:limit={limit}"
    tap = FirstLogits()
    with stack.attached(model, tokenizer), record_positions(model) as rec:
        assert all(isinstance(p, ClampedRopePolicy) for p in layer_policies(model))
        generate_batch(model, tokenizer, batch, DecodeSettings(max_new_tokens=3), MethodStack([*stack.methods, tap]))
    assert layer_policies(model) == before  # the very objects: the untouched kernels run again
    assert max(float(p.max()) for p in rec.positions) <= limit
    # Reference: the untouched model given the clamped prompt positions (HF's own tables: equal up to rounding).
    with torch.no_grad():
        clamped = batch.position_ids.clamp(max=limit)
        expected = model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=clamped).logits[:, -1]
    assert_close_to_scale(tap.seen[0], expected, 1e-5, what="step-0 logits")
