"""The reserved KV cache: the same K/V and logits as HF's DynamicCache, appended in place, regrown when full."""

from __future__ import annotations

import pytest
import torch
from float_checks import assert_close_to_scale
from method_helpers import batch_of
from transformers import DynamicCache

from evaluation.methods import MethodStack
from evaluation.methods.kv_cache import ReservedLayer, reserved_cache
from repo_train.modeling.cache_keyword import cache_argument


def states(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, tokens, 4, generator=generator), torch.randn(2, 3, tokens, 5, generator=generator)


def test_appends_in_place_and_holds_what_concatenation_holds():
    reserved, plain = ReservedLayer(reserve=2), DynamicCache().layer_class_to_replicate()
    for step, tokens in enumerate([5, 1, 1, 1, 3, 1]):  # the third 1-token step and the 3-token one overflow
        keys, values = states(tokens, step)
        got, want = reserved.update(keys, values), plain.update(keys, values)
        # copies of the same floats: bit for bit
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        if step == 1:
            buffer = reserved.keys.data_ptr()
        if step == 2:
            assert reserved.keys.data_ptr() == buffer  # written into the room the prefill left: no new tensor
    assert reserved.get_seq_length() == 12


def test_follows_keys_replaced_from_outside():
    layer = ReservedLayer(reserve=4)
    first = states(6, 0)
    layer.update(*first)
    layer.keys, layer.values = layer.keys[..., :-1, :], layer.values[..., :-1, :]  # as Found in the Middle drops one
    step = states(1, 1)
    keys, values = layer.update(*step)
    assert torch.equal(keys, torch.cat([first[0][..., :5, :], step[0]], dim=-2))
    layer.keys, layer.values = keys[1:].clone(), values[1:].clone()  # a new tensor (one row kept): copied again
    keys, values = layer.update(*(s[1:] for s in states(1, 2)))
    assert keys.shape == (1, 3, 7, 4) and torch.equal(keys[..., :6, :], layer.keys[..., :6, :])


def test_refuses_a_layer_without_room():
    with pytest.raises(ValueError, match="room for at least 1 token"):
        ReservedLayer(reserve=0)


def test_a_decoding_run_gives_dynamic_caches_logits(tiny_lm):
    model, tokenizer = tiny_lm
    batch = batch_of(tokenizer)
    logits = {}
    for name, cache in (("plain", DynamicCache(config=model.config)), ("reserved", reserved_cache(model, reserve=2))):
        inputs, positions, mask, seen = batch.input_ids, batch.position_ids, batch.attention_mask, []
        for _ in range(5):  # the prefill, then four steps: the reserve of 2 runs out once
            out = model(
                input_ids=inputs, attention_mask=mask, position_ids=positions, **cache_argument(cache), use_cache=True
            )
            seen.append(out.logits[:, -1])
            inputs, positions = out.logits[:, -1].argmax(-1, keepdim=True), positions[:, -1:] + 1
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        logits[name] = seen
        assert all(isinstance(layer, ReservedLayer) for layer in cache.layers) == (name == "reserved")
    for step, (a, b) in enumerate(zip(logits["reserved"], logits["plain"])):
        # the same K/V values; attention over a strided view may block its sums differently (drift measured 0)
        assert_close_to_scale(a, b, 1e-6, what=f"logits of step {step}")


def test_positional_hidden_cached_steps_equal_its_recomputed_rows(tiny_lm):
    """PositionalHidden's cached decoding is not a plain recomputation: each step is a recomputed row (the
    authors' rule), so it equals one forward over prompt + generated tokens with the prompt's last row and every
    generated row recomputed, on a left-padded batch in the harness's reserved cache."""
    model, tokenizer = tiny_lm
    batch = batch_of(tokenizer)
    stack = MethodStack.parse("positional_hidden:dims=3;17,layers=1-2,factor=0")
    steps, seen, chosen = 4, [], []
    with stack.attached(model, tokenizer), torch.no_grad():
        cache = reserved_cache(model, reserve=2)
        inputs, positions, mask = batch.input_ids, batch.position_ids, batch.attention_mask
        for _ in range(steps):
            out = model(
                input_ids=inputs, attention_mask=mask, position_ids=positions, **cache_argument(cache), use_cache=True
            )
            seen.append(out.logits[:, -1])
            inputs, positions = out.logits[:, -1].argmax(-1, keepdim=True), positions[:, -1:] + 1
            chosen.append(inputs)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        ids = torch.cat([batch.input_ids, *chosen[:-1]], dim=1)
        full_mask = mask[:, :-1]
        full_positions = (full_mask.cumsum(-1) - 1).clamp_min(0)
        stack.methods[0].set_prefill_rows(steps)
        whole = model(input_ids=ids, attention_mask=full_mask, position_ids=full_positions).logits[:, -steps:]
        stack.methods[0].set_prefill_rows(None)
        plain = model(input_ids=ids, attention_mask=full_mask, position_ids=full_positions).logits[:, -steps:]
    cached = torch.stack(seen, dim=1)
    # the same rule by two paths (cache vs one forward): float drift only (measured ~1e-7 of the scale)
    assert_close_to_scale(cached, whole, 1e-5, what="cached steps vs recomputed rows")
    gap = float((cached - plain)[:, 1:].abs().max() / whole.abs().max())
    assert gap > 1e-3  # a plain forward recomputes only its last row: not the rule
