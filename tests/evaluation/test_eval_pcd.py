"""PCD: θ* from T(x), the contrast on the top-γ set, S(L), β = 0 = greedy, cached decoding = recomputation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from method_helpers import batch_of, tokens

from evaluation.generation import DecodeSettings, generate_batch
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.pcd import (
    SideDecoder,
    contrast_logits,
    encoding_policies,
    pcd_encoding,
    pcd_salience,
)
from repo_train.modeling import (
    RePoOlmo2ForCausalLM,
    RotaryEncoding,
    current_policies,
    layer_policies,
    swapped_policies,
)
from repo_train.modeling.presets import tiny

SETTINGS = DecodeSettings(max_new_tokens=6, batch_size=3)


@pytest.mark.parametrize(("alpha", "ratio"), [(0.2, 1e-4), (0.5, 0.01)])
def test_over_rotated_frequencies_follow_the_formula(tiny_lm, alpha, ratio):
    model, _ = tiny_lm
    d, base = 16, 10_000.0  # tiny: 64 / 4 heads, rope_theta 10,000
    expected = []
    for j in range(d // 2):
        t = 2 - math.exp(alpha * j / (d / 2))
        theta, theta_low = base ** (-2 * j / d), (base * ratio) ** (-2 * j / d)
        expected.append(t * theta + (1 - t) * theta_low)
    encoding = pcd_encoding(model.config, alpha, ratio)
    assert torch.allclose(encoding.inv_freq, torch.tensor(expected, dtype=torch.float32), rtol=1e-6, atol=0)
    assert encoding.inv_freq[0] == 1.0  # T(0) = 1: the highest frequency is kept
    assert bool((encoding.inv_freq[1:] > RotaryEncoding.from_config(model.config).inv_freq[1:]).all())  # faster


def test_contrast_acts_on_the_top_gamma_tokens_only():
    logits = torch.tensor([[3.0, 1.0, 2.0, 0.0]])
    local = torch.tensor([[1.0, -10.0, 5.0, 0.0]])
    # top-2 of L = {0, 2}: (1 + 2)·3 - 2·1 = 7 and 3·2 - 2·5 = -4; token 1 would score 23 but is excluded.
    out = contrast_logits(logits, local, beta=2.0, top_k=2)
    assert out[0, 0] == 7 and out[0, 2] == -4 and out[0, 1] == -math.inf and out[0, 3] == -math.inf
    flipped = contrast_logits(logits, torch.tensor([[4.0, 0.0, 0.0, 0.0]]), beta=2.0, top_k=2)
    assert flipped.argmax().item() == 2  # 9 - 8 = 1 < 6 - 0 = 6: the contrast changes the greedy choice
    assert torch.equal(contrast_logits(logits, local, beta=0.0, top_k=4), logits)


@dataclass
class LogitsTap(Method):
    """Test method: keeps the logits of every step."""

    name: ClassVar[str] = "test_pcd_tap"
    seen: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.seen.append(logits.clone())
        return logits


def test_beta_zero_is_greedy_exactly(tiny_lm):
    model, tokenizer = tiny_lm
    base_tap, tap = LogitsTap(), LogitsTap()
    baseline = generate_batch(model, tokenizer, batch_of(tokenizer), SETTINGS, MethodStack([base_tap]))
    stack = MethodStack([build_method("pcd:beta=0"), tap])
    with stack.attached(model, tokenizer):
        plain = generate_batch(model, tokenizer, batch_of(tokenizer), SETTINGS, stack)
    assert tokens(plain) == tokens(baseline)
    for before, after in zip(base_tap.seen, tap.seen):
        kept = after > -math.inf
        # exact: (1 + 0)·L - 0·L* is L to the bit, for finite L*
        assert int(kept.sum(dim=-1).min()) == 30 and torch.equal(after[kept], before[kept])


@dataclass
class SideCheck(Method):
    """Test method: runs a side decoder with the model's own encoding and keeps |Δlogits| against the harness."""

    name: ClassVar[str] = "test_side_check"
    diffs: list = field(default_factory=list, init=False)

    def attach(self, model, tokenizer):
        own = RotaryEncoding.from_config(model.config)
        self.policies = encoding_policies(current_policies(model), own, "test")

    def process_logits(self, step, logits, state):
        side = state.scratch_for(self).setdefault("side", SideDecoder(self.policies))
        self.diffs.append(float((side.step(state) - logits).abs().max()))
        return logits


def test_side_decoder_with_the_models_own_encoding_reproduces_the_harness(tiny_lm):
    model, tokenizer = tiny_lm
    before = layer_policies(model)
    check = SideCheck()
    with MethodStack([check]).attached(model, tokenizer):
        generate_batch(model, tokenizer, batch_of(tokenizer), SETTINGS, MethodStack([check]))
    # exact: the side decoder replays the harness's prefill and cached steps with the same shapes; its angles
    # give cos/sin equal to HF's tables bit for bit, and the rotation is elementwise
    assert len(check.diffs) == SETTINGS.max_new_tokens and max(check.diffs) == 0.0
    assert layer_policies(model) == before  # the swap put the original policy objects back


def test_alpha_zero_contrasts_a_model_with_itself(tiny_lm):
    model, tokenizer = tiny_lm
    baseline = generate_batch(model, tokenizer, batch_of(tokenizer), SETTINGS)
    stack = MethodStack.parse("pcd:alpha=0")  # θ* = θ, so L* = L and L̃ = L on the top-γ tokens
    with stack.attached(model, tokenizer):
        assert tokens(generate_batch(model, tokenizer, batch_of(tokenizer), SETTINGS, stack)) == tokens(baseline)


def recomputed_pcd_argmax(model, batch, generated, method):
    """PCD's greedy choices without caches: both forwards over the whole sequence at every step."""
    ids, mask = batch.input_ids, batch.attention_mask
    positions = batch.position_ids
    following = positions.masked_fill(mask == 0, -1).amax(dim=1, keepdim=True) + 1
    chosen = []
    with torch.no_grad():
        for step in range(generated.shape[1]):
            standard = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
            with swapped_policies(model, method._policies):
                local = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
            chosen.append(contrast_logits(standard, local, method.beta, method.gamma).argmax(-1))
            ids = torch.cat([ids, generated[:, step : step + 1]], dim=1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = torch.cat([positions, following + step], dim=1)
    return torch.stack(chosen, dim=1)


def test_cached_pcd_equals_recomputation_and_changes_greedy(tiny_lm):
    model, tokenizer = tiny_lm
    batch = batch_of(tokenizer)
    baseline = generate_batch(model, tokenizer, batch, SETTINGS)
    method = build_method("pcd:alpha=0.5,ratio=0.01")
    with MethodStack([method]).attached(model, tokenizer):
        outputs = generate_batch(model, tokenizer, batch, SETTINGS, MethodStack([method]))
        generated = torch.tensor([o.token_ids + [0] * (SETTINGS.max_new_tokens - len(o.token_ids)) for o in outputs])
        again = recomputed_pcd_argmax(model, batch, generated, method)
    for row, output in enumerate(outputs):
        assert again[row, : len(output.token_ids)].tolist() == output.token_ids
    assert tokens(outputs) != tokens(baseline)


def test_salience_with_and_without_pcd(tiny_lm):
    model, tokenizer = tiny_lm
    prompts, answers = ["Question: colour of snow?\nAnswer:", "Q: 2+2?\nA:"], ["white", "4"]
    same = pcd_salience(model, tokenizer, prompts, answers, build_method("pcd:beta=0,gamma=258"))
    assert same["standard"] == same["pcd"] and 0 < same["standard"] <= 1 and same["queries"] == 2
    scores = pcd_salience(model, tokenizer, prompts, answers)
    assert scores["standard"] == same["standard"] and 0 < scores["pcd"] <= 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("pcd:alpha=-0.1", "alpha must be a finite number >= 0"),
        ("pcd:beta=-1", "beta must be a finite number >= 0"),
        ("pcd:ratio=0", r"ratio \(B'/B\) must be in \(0, 1\]"),
        ("pcd:gamma=0", "gamma .* must be >= 1"),
        ("pcd:gamma=2.5", "gamma must be int"),
    ],
)
def test_bad_parameters_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        build_method(spec)


def test_learned_positions_are_refused():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    with (
        pytest.raises(ValueError, match="layer 1 uses the 'repo' policy"),
        MethodStack.parse("pcd").attached(model, None),
    ):
        pass
