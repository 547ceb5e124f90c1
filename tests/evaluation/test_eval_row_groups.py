"""Row groups: Attention Buckets and PCD batched into the harness's forward give the sequential passes' outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from float_checks import assert_close_to_scale
from method_helpers import batch_of, gqa_llama, tokens

from evaluation.generation import DecodeSettings, collate, generate_batch, tokenize_prompts
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.row_groups import GroupedPolicy, RowGroups
from evaluation.model_loading import byte_tokenizer
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_train.modeling import NopePolicy, RopePolicy, RotaryEncoding, layer_policies
from repo_train.modeling.scaling import ScaledRopePolicy

SETTINGS = DecodeSettings(max_new_tokens=6, batch_size=3)


@dataclass
class Tap(Method):
    """Test method: keeps the logits of every step it sees (placed last: the logits greedy picks from)."""

    name: ClassVar[str] = "test_row_groups_tap"
    seen: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.seen.append(logits.clone())
        return logits


def run(model, tokenizer, spec, batch=None, settings=SETTINGS):
    """Tokens, final logits of every step and the number of model forwards of one generated batch."""
    tap, calls = Tap(), []
    stack = MethodStack([*MethodStack.parse(spec).methods, tap])
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        with stack.attached(model, tokenizer):
            outputs = generate_batch(model, tokenizer, batch or batch_of(tokenizer), settings, stack)
    finally:
        hook.remove()
    return tokens(outputs), tap.seen, len(calls)


def assert_same_as_sequential(model, tokenizer, spec, batch=None, settings=SETTINGS, extra_passes=1, setup_calls=0):
    batched_tokens, batched_logits, batched_calls = run(model, tokenizer, spec, batch, settings)
    separator = "," if ":" in spec.split("+")[-1] else ":"
    sequential_tokens, sequential_logits, sequential_calls = run(
        model, tokenizer, spec + separator + "passes=sequential", batch, settings
    )
    assert batched_tokens == sequential_tokens
    steps = len(batched_logits)
    # the prefill runs group by group (1 + n forwards) in both forms; after it, one forward per decoding step ...
    assert steps == settings.max_new_tokens and batched_calls == setup_calls + (1 + extra_passes) + (steps - 1)
    assert sequential_calls == setup_calls + steps * (1 + extra_passes)  # ... where the sequential form runs 1 + n
    for step, (a, b) in enumerate(zip(batched_logits, sequential_logits)):
        # not bitwise: the same rows in a larger batch may take other matmul blockings. Drift measured (1 and 2
        # threads) <= 2.4e-6 of max |logits| after PCD's contrast ((1 + β) L - β L* scales it), <= 2.3e-7 without
        assert_close_to_scale(a, b, 3e-5, what=f"logits of step {step}")
    return batched_logits


@pytest.mark.parametrize(
    ("spec", "extra"),
    [
        ("pcd", 1),
        ("pcd:alpha=0.5,ratio=0.01", 1),
        ("attention_buckets", 5),  # six bases, one of them the model's own (the harness's rows)
        ("attention_buckets:bases=300|20000,combine=mean", 2),
        ("pi:scale=2+pcd", 1),  # scaled positions in every group
    ],
)
def test_batched_passes_equal_the_sequential_ones(tiny_lm, spec, extra):
    model, tokenizer = tiny_lm
    before = layer_policies(model)
    logits = assert_same_as_sequential(model, tokenizer, spec, extra_passes=extra)
    baseline = run(model, tokenizer, "baseline")[1]
    assert not torch.allclose(logits[0], baseline[0], atol=1e-3)  # the copies did change the logits
    assert layer_policies(model) == before  # the grouped policies were swapped out after every forward


def test_batched_passes_on_a_gqa_llama_with_an_all_ones_mask(spread):
    tokenizer = byte_tokenizer()
    model = spread(gqa_llama(tokenizer, num_hidden_layers=3))
    same_length = batch_of(tokenizer, ["first prompt", "other prompt"])  # no padding: the mask is dropped
    assert bool((same_length.attention_mask == 1).all())
    for spec, extra in (("attention_buckets:bases=10000|500|40000", 2), ("pcd", 1)):
        assert_same_as_sequential(model, tokenizer, spec, extra_passes=extra)
        assert_same_as_sequential(model, tokenizer, spec, batch=same_length, extra_passes=extra)


def test_batched_pcd_under_found_in_the_middle_edits_every_copy(tiny_lm):
    model, tokenizer = tiny_lm
    texts, spans = [], []
    for i in range(2):
        docs = [Passage(f"Title {i}{j}", f"Passage {j} of set {i} on rivers.") for j in range(3)]
        prompt, item_spans = build_mdqa_prompt(f"which river, set {i}?", docs)
        texts.append(prompt)
        spans.append(item_spans)
    batch = collate(tokenize_prompts(tokenizer, texts, spans), tokenizer.pad_token_id)
    settings = DecodeSettings(max_new_tokens=4, batch_size=2)
    # FiM's calibration is one more forward (the prompts and their dummy variants), before the first step
    assert_same_as_sequential(model, tokenizer, "fim:layers=last_half+pcd", batch, settings, setup_calls=1)


def test_labels_keep_the_default_and_name_the_sequential_form():
    assert build_method("pcd").spec() == "pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30"
    assert build_method("pcd:passes=sequential").spec().endswith(",gamma=30,passes=sequential")
    assert build_method("attention_buckets:bases=10000").spec() == "attention_buckets:bases=10000,combine=confidence"
    for spec in ("pcd:passes=twice", "attention_buckets:passes=parallel"):
        with pytest.raises(ValueError, match=r"passes must be one of \['batched', 'sequential'\]"):
            build_method(spec)


def test_beta_zero_asks_for_no_copy(tiny_lm):
    model, tokenizer = tiny_lm
    stack = MethodStack.parse("pcd:beta=0")
    with stack.attached(model, tokenizer):
        assert RowGroups.of(stack, model, 3) is None


def test_grouped_policy_rows_and_refusals(tiny_lm):
    model, _ = tiny_lm
    attention = model.model.layers[0].self_attn
    scaled = ScaledRopePolicy(RotaryEncoding.from_config(model.config), 4.0)
    grouped = GroupedPolicy([RopePolicy(), scaled], rows=2)
    ids = torch.arange(5).expand(4, 5)
    rotation = grouped.rotation(attention, torch.zeros(4, 5, 8), ids, None, record=True)
    assert torch.equal(rotation.positions[:2, 0], ids[:2].float()) and torch.equal(
        rotation.positions[2:, 0], ids[2:] / 4
    )
    assert GroupedPolicy([NopePolicy(), NopePolicy()], rows=2).rotation(attention, None, ids, None, False) is None
    with pytest.raises(ValueError, match="expects 4 rows, got 2"):
        grouped.rotation(attention, torch.zeros(2, 5, 8), ids[:2], None, record=False)
    with pytest.raises(ValueError, match="RoPE or NoPE in every group"):
        GroupedPolicy([RopePolicy(), NopePolicy()], rows=2)
