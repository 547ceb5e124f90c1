"""Ms-PoE and Attention Buckets: formulas by hand, identity settings = baseline, cached decoding = recomputation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from float_checks import assert_close_to_scale
from method_helpers import batch_of, gqa_llama, tokens

from evaluation.generation import DecodeSettings, generate_batch
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.scaling_baselines import (
    MsPoePolicy,
    SplitRotation,
    combine_buckets,
    head_ranks,
    mspoe_ratios,
    outlier_fraction,
)
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM, layer_policies, record_positions, swapped_policies
from repo_train.modeling.presets import tiny
from repo_train.modeling.rope import RotaryEncoding

SETTINGS = DecodeSettings(max_new_tokens=6, batch_size=3)


@dataclass
class LogitsTap(Method):
    """Test method: keeps the logits of every step."""

    name: ClassVar[str] = "test_baselines_tap"
    seen: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.seen.append(logits.clone())
        return logits


def run(model, tokenizer, spec=None, batch=None, settings=SETTINGS):
    """Tokens and per-step logits of a method stack (None = baseline)."""
    tap = LogitsTap()
    stack = MethodStack([*(MethodStack.parse(spec).methods if spec else []), tap])
    with stack.attached(model, tokenizer):
        outputs = generate_batch(model, tokenizer, batch or batch_of(tokenizer), settings, stack)
    return tokens(outputs), tap.seen


def padded(outputs_tokens, width):
    return torch.tensor([t + [0] * (width - len(t)) for t in outputs_tokens])


def test_mspoe_ratios_and_head_ranking_by_hand():
    assert mspoe_ratios(4, 1.2, 1.8).tolist() == pytest.approx([1.2, 1.35, 1.5, 1.65])  # r_min + 0.6·k/4
    # One query, two heads, six keys, the last one padding (n = 5 real keys, outlier above 4/5 = 0.8).
    query = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # head 1 attends uniformly
    keys = torch.zeros(1, 2, 6, 2)
    keys[0, :, 0, 0] = 10.0  # head 0: key 0 takes e^10 / (e^10 + 4) > 0.8 of the weight
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    assert outlier_fraction(query, keys, mask, scaling=1.0).tolist() == [[pytest.approx(1 / 5), 0.0]]
    assert outlier_fraction(query, keys, None, scaling=1.0).tolist() == [[pytest.approx(1 / 6), 0.0]]
    # rank 0 = most outliers; ties keep head order
    assert head_ranks(torch.tensor([[0.1, 0.1, 0.3], [0.0, 0.2, 0.1]])).tolist() == [[1, 2, 0], [2, 0, 1]]


@pytest.mark.parametrize("order", ["outlier", "index"])
def test_mspoe_with_all_ratios_one_equals_the_baseline_exactly(tiny_lm, order):
    model, tokenizer = tiny_lm
    base_tokens, base_logits = run(model, tokenizer)
    ms_tokens, ms_logits = run(model, tokenizer, f"ms_poe:min_ratio=1,max_ratio=1,head_order={order}")
    assert ms_tokens == base_tokens
    # exact: positions / 1.0 are the same floats, cos/sin come from tables equal to HF's bit for bit
    # (test_rope_encoding), and the rotation is elementwise: no reduction whose order could change
    assert all(torch.equal(a, b) for a, b in zip(ms_logits, base_logits))


def test_mspoe_on_a_gqa_llama_with_ratios_one_equals_its_baseline(spread):
    tokenizer = byte_tokenizer()
    model = spread(gqa_llama(tokenizer, num_hidden_layers=3))
    base_tokens, base_logits = run(model, tokenizer)
    ms_tokens, ms_logits = run(model, tokenizer, "ms_poe:min_ratio=1,max_ratio=1")  # keys expanded per query head
    assert ms_tokens == base_tokens
    for a, b in zip(ms_logits, base_logits):  # not exact: keys expanded to 4 heads run as MHA, not GQA, in SDPA
        assert_close_to_scale(a, b, 1e-5, what="logits")
    scaled_logits = run(model, tokenizer, "ms_poe:min_ratio=2,max_ratio=6,start_layer=0")[1]  # ranks on grouped keys
    assert not torch.allclose(scaled_logits[0], base_logits[0], atol=1e-3)


def test_mspoe_divides_positions_per_head_from_the_start_layer(tiny_lm):
    model, tokenizer = tiny_lm
    heads, length = model.config.num_attention_heads, 12
    ratios = mspoe_ratios(heads, 1.2, 1.8).float()
    before = layer_policies(model)
    for order in ("index", "outlier"):
        stack = MethodStack.parse(f"ms_poe:head_order={order}")
        with stack.attached(model, tokenizer):
            with torch.no_grad(), record_positions(model) as rec:
                model(torch.tensor([list(range(2, 2 + length))]))
            policies = [p for p in layer_policies(model) if isinstance(p, MsPoePolicy)]
        assert len(policies) == model.config.num_hidden_layers - 2  # layers 0 and 1 unchanged
        linear = torch.arange(float(length))
        for layer, positions in enumerate(rec.positions):
            if layer < 2:
                assert torch.equal(positions, linear.expand(1, heads, length))
                continue
            ranks = policies[layer - 2].ranks[0]
            if order == "index":
                assert ranks.tolist() == list(range(heads))
            assert sorted(ranks.tolist()) == list(range(heads))  # a permutation: each ratio used once
            assert torch.equal(positions[0], linear[None, :] / ratios[ranks][:, None])
    assert layer_policies(model) == before


def recomputed_argmax(model, batch, generated, combine=None):
    """Greedy choices recomputed without a cache (the whole sequence every step); `combine(ids, mask, pos)` -> logits."""
    ids, mask, positions = batch.input_ids, batch.attention_mask, batch.position_ids
    following = positions.masked_fill(mask == 0, -1).amax(dim=1, keepdim=True) + 1

    def forward(ids, mask, positions):
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]

    chosen = []
    with torch.no_grad():
        for step in range(generated.shape[1]):
            logits = (combine or forward)(ids, mask, positions)
            chosen.append(logits.argmax(-1))
            ids = torch.cat([ids, generated[:, step : step + 1]], dim=1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = torch.cat([positions, following + step], dim=1)
    return torch.stack(chosen, dim=1)


def assert_chain(outputs_tokens, again):
    for row, chain in enumerate(outputs_tokens):
        assert again[row, : len(chain)].tolist() == chain


def test_mspoe_cached_generation_equals_recomputation(tiny_lm):
    model, tokenizer = tiny_lm
    batch = batch_of(tokenizer)
    _, base_logits = run(model, tokenizer, batch=batch)
    tap = LogitsTap()
    stack = MethodStack([*MethodStack.parse("ms_poe:min_ratio=2,max_ratio=6").methods, tap])
    with stack.attached(model, tokenizer):
        outputs = tokens(generate_batch(model, tokenizer, batch, SETTINGS, stack))
        # the head ranks of this batch's prompts stay on the policies, so a recomputation uses the same ratios
        again = recomputed_argmax(model, batch, padded(outputs, SETTINGS.max_new_tokens))
    assert_chain(outputs, again)
    assert not torch.allclose(tap.seen[0], base_logits[0], atol=1e-3)  # the positions did change something


def test_bucket_combination_by_hand():
    first, second = torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[math.log(4.0), 0.0]])
    p1, p2 = torch.tensor([0.25, 0.75]), torch.tensor([0.8, 0.2])  # softmax of each
    a1, a2 = 0.75 / (0.75 + 0.8), 0.8 / (0.75 + 0.8)  # confidence = max probability, normalised
    expected = (a1 * p1 + a2 * p2).log()
    assert torch.allclose(combine_buckets([first, second], "confidence")[0], expected)
    assert torch.allclose(combine_buckets([first, second], "mean")[0], ((p1 + p2) / 2).log())


def test_one_bucket_at_the_models_base_equals_the_baseline_exactly(tiny_lm):
    model, tokenizer = tiny_lm
    base_tokens, base_logits = run(model, tokenizer)
    bucket_tokens, bucket_logits = run(model, tokenizer, "attention_buckets:bases=10000")
    # exact: a bucket at the model's own base is the harness's own forward, and one bucket's logits pass as they are
    assert bucket_tokens == base_tokens and all(torch.equal(a, b) for a, b in zip(bucket_logits, base_logits))


def test_one_bucket_at_another_base_equals_a_model_built_with_that_base(tiny_lm):
    model, tokenizer = tiny_lm
    rebased = RePoOlmo2ForCausalLM(
        tiny(
            vocab_size=len(tokenizer),
            pad_token_id=0,
            eos_token_id=1,
            rope_parameters={"rope_type": "default", "rope_theta": 20_000.0},
        )
    ).eval()
    rebased.load_state_dict(model.state_dict())
    rebased.generation_config.pad_token_id, rebased.generation_config.eos_token_id = 0, 1
    want_tokens, want_logits = run(rebased, tokenizer)
    got_tokens, got_logits = run(model, tokenizer, "attention_buckets:bases=20000")
    assert got_tokens == want_tokens
    for a, b in zip(got_logits, want_logits):
        assert_close_to_scale(a, b, 1e-5, what="logits")


def test_buckets_cached_generation_equals_recomputation(tiny_lm):
    model, tokenizer = tiny_lm
    batch = batch_of(tokenizer)
    method = build_method("attention_buckets:bases=10000|300")
    with MethodStack([method]).attached(model, tokenizer):
        outputs = tokens(generate_batch(model, tokenizer, batch, SETTINGS, MethodStack([method])))

        def combine(ids, mask, positions):
            per_bucket = []
            for policies in method._buckets:
                if policies is None:
                    per_bucket.append(model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1])
                    continue
                with swapped_policies(model, policies):
                    per_bucket.append(model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1])
            return combine_buckets(per_bucket, method.combine)

        again = recomputed_argmax(model, batch, padded(outputs, SETTINGS.max_new_tokens), combine)
    assert_chain(outputs, again)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ms_poe:min_ratio=0", "min_ratio must be a finite number > 0"),
        ("ms_poe:min_ratio=1.5,max_ratio=1.2", "max_ratio must be >= min_ratio=1.5"),
        ("ms_poe:start_layer=-1", "start_layer must be >= 0"),
        ("ms_poe:head_order=entropy", "head_order must be one of"),
        ("attention_buckets:bases=ten", "bases must be numbers separated by '|'"),
        ("attention_buckets:bases=10000|0.5", r"every base must be a finite number > 1, got \[0.5\]"),
        ("attention_buckets:combine=max", "combine must be 'confidence' or 'mean'"),
    ],
)
def test_bad_parameters_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        build_method(spec)


def test_models_the_methods_cannot_serve_are_refused(tiny_lm):
    model, tokenizer = tiny_lm
    repo = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    yarn = RePoOlmo2ForCausalLM(tiny(rope_parameters={"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 2.0}))
    cases = [
        ("ms_poe:start_layer=4", model, "start_layer=4 but the model has 4 layers"),
        ("ms_poe", repo, "layer 2 uses the 'repo' policy"),
        ("attention_buckets:bases=500", repo, "layer 1 uses the 'repo' policy"),
        ("attention_buckets", yarn, "rope_type 'default' only"),
    ]
    for spec, target, message in cases:
        with pytest.raises(ValueError, match=message), MethodStack.parse(spec).attached(target, tokenizer):
            pass


def _authors_head_ratios(attention, hidden, ratios, key_groups):
    """The authors' rule, re-written here from their code's description (VITA-Group/Ms-PoE, llama.py, 2024-03-28):
    causal softmax of unrotated q·k/√d over the whole prompt, each row's mean taken over every key column (masked
    ones count as zero), outliers above 3× that mean in the last row, heads sorted by outlier share (most first),
    the ratio table indexed by that permutation, and each shared key head taking its group's first query head's
    ratio. Returns (query-head ratios [H], key ratios per query head [H])."""
    heads, dim = attention.config.num_attention_heads, attention.head_dim
    length = hidden.shape[1]
    q = attention.q_proj(hidden).view(1, length, heads, dim).transpose(1, 2)
    k = attention.k_proj(hidden).view(1, length, -1, dim).transpose(1, 2).repeat_interleave(key_groups, dim=1)
    scores = q @ k.transpose(2, 3) / math.sqrt(dim)
    causal = torch.full((length, length), float("-inf")).triu(1)
    weights = (scores + causal).softmax(dim=-1)[0]  # [H, S, S]
    average = weights.mean(-1, keepdim=True)
    outlier = -(weights > 3 * average).float().mean(-1)[:, -1]
    order = torch.sort(outlier, stable=True).indices
    query_ratios = ratios[order]
    return query_ratios, query_ratios[::key_groups].repeat_interleave(key_groups)


def _layer_inputs(model):
    """Hooks that keep each attention layer's input hidden states of the next forward; (inputs, remove)."""
    inputs = {}

    def keep_input(index):
        def hook(module, args, kwargs):
            inputs.setdefault(index, kwargs["hidden_states"])

        return hook

    hooks = [
        layer.self_attn.register_forward_pre_hook(keep_input(index), with_kwargs=True)
        for index, layer in enumerate(model.model.layers)
    ]
    return inputs, lambda: [hook.remove() for hook in hooks]


def _ms_poe_ratios(model, tokenizer, ids, spec):
    """Per Ms-PoE layer: (query-head ratios, key ratios per query head) the method used, and the layer inputs."""
    inputs, remove = _layer_inputs(model)
    ratios = mspoe_ratios(4, 1.2, 1.8)
    try:
        with MethodStack.parse(spec).attached(model, tokenizer), torch.no_grad():
            model(ids)
            used = {}
            for index, policy in enumerate(layer_policies(model)):
                if isinstance(policy, MsPoePolicy):
                    query = ratios[policy.ranks[0]]
                    used[index] = (query, query if policy.key_heads is None else query[policy.key_heads])
    finally:
        remove()
    return used, inputs


def test_the_default_is_the_authors_rule_on_a_gqa_model(spread):
    tokenizer = byte_tokenizer()
    model = spread(gqa_llama(tokenizer, num_hidden_layers=4))
    ids = torch.tensor([tokenizer("Document [1] a b c\nDocument [2] d e f\nQuestion: which?")["input_ids"]])
    used, inputs = _ms_poe_ratios(model, tokenizer, ids, "ms_poe")
    assert sorted(used) == [2, 3]
    ratios = mspoe_ratios(4, 1.2, 1.8)
    with torch.no_grad():
        authors = {i: _authors_head_ratios(model.model.layers[i].self_attn, inputs[i], ratios, 2) for i in used}
    for index, (query_ratios, key_ratios) in used.items():
        assert torch.equal(query_ratios, authors[index][0]) and torch.equal(key_ratios, authors[index][1])
    # The project's earlier readings (ratio by rank, each query head its own key ratio) differ on this prompt.
    readings, _ = _ms_poe_ratios(model, tokenizer, ids, "ms_poe:head_order=outlier_rank,gqa_keys=per_query")
    assert any(not torch.equal(readings[i][1], authors[i][1]) for i in used)


def test_shared_key_heads_are_rotated_with_their_groups_first_ratio():
    """SplitRotation rotates queries by their own positions and keys by `key_positions`, each as RoPE would."""
    encoding = RotaryEncoding(inv_freq=1.0 / (10_000 ** (torch.arange(0, 8, 2).float() / 8)))
    query, key = torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8)
    positions = torch.arange(5.0)[None, None, :] / torch.tensor([1.2, 1.35, 1.5, 1.65])[None, :, None]
    key_positions = positions[:, [0, 0, 2, 2]]
    q, k = SplitRotation(encoding=encoding, positions=positions, key_positions=key_positions).apply(query, key)
    assert torch.equal(q, encoding.rotate(query, key, positions)[0])
    assert torch.equal(k, encoding.rotate(query, key, key_positions)[1])
