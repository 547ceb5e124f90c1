"""The attention probe: its rows against eager attention weights, bit-identity with SDPA, the edit path."""

from __future__ import annotations

import pytest
import torch
from float_checks import assert_close_to_scale
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

from evaluation.attention_probe import PROBE_IMPLEMENTATION, install_probe, probe_of, probing, remove_probe
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.cache_keyword import cache_argument
from repo_train.modeling.presets import tiny

LLAMA_GQA = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,  # two query heads per key/value head
    max_position_embeddings=256,
)


def _models(family: str):
    """(model under test with SDPA, the same weights with eager attention) for a family."""
    torch.manual_seed(0)
    if family == "olmo2":
        model = RePoOlmo2ForCausalLM(tiny()).eval()
        # The independent reference: transformers' own OLMo-2, same weights, eager attention.
        fields = {k: v for k, v in tiny().to_dict().items() if k in Olmo2Config().to_dict()}
        eager = Olmo2ForCausalLM(Olmo2Config(**fields, attn_implementation="eager")).eval()
    else:
        model = LlamaForCausalLM(LlamaConfig(**LLAMA_GQA, attn_implementation="sdpa")).eval()
        eager = LlamaForCausalLM(LlamaConfig(**LLAMA_GQA, attn_implementation="eager")).eval()
    eager.load_state_dict(model.state_dict())
    return model, eager


def _padded_batch(vocab: int, lengths=(14, 10)):
    """Two left-padded rows (ids, mask, positions), so masks are real tensors, not SDPA's is_causal shortcut."""
    width = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), width))
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids, mask, positions


@pytest.mark.parametrize("family", ["olmo2", "llama_gqa"])
@torch.no_grad()
def test_probe_rows_equal_eager_attention_rows(family):
    model, eager = _models(family)
    layers = range(model.config.num_hidden_layers)
    ids, mask, pos = _padded_batch(model.config.vocab_size)
    reference = eager(ids, attention_mask=mask, position_ids=pos, output_attentions=True).attentions
    plain = eager(ids[:1], output_attentions=True).attentions  # no padding: SDPA gets mask=None (causal)
    with probing(model) as probe:
        # prefill, the last prompt row (and the last 3 rows, the recomputation mode)
        for rows in (1, 3):
            probe.request(record=layers, query_rows=rows)
            model(ids, attention_mask=mask, position_ids=pos)
            for layer in layers:
                assert probe.rows[layer].shape == (2, model.config.num_attention_heads, rows, ids.shape[1])
                assert_close_to_scale(probe.rows[layer], reference[layer][:, :, -rows:], 1e-5, scale=1.0)
        probe.request(record=layers, query_rows=4)
        model(ids[:1])
        for layer in layers:
            assert_close_to_scale(probe.rows[layer], plain[layer][:, :, -4:], 1e-5, scale=1.0)
        # decode: the single new token over the cached keys
        cache = DynamicCache(config=model.config)
        model(
            ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], **cache_argument(cache), use_cache=True
        )
        probe.request(record=layers)
        model(ids[:, -1:], attention_mask=mask, position_ids=pos[:, -1:], **cache_argument(cache), use_cache=True)
        for layer in layers:
            assert_close_to_scale(probe.rows[layer][:, :, 0], reference[layer][:, :, -1], 1e-5, scale=1.0)
            assert torch.allclose(probe.rows[layer].sum(-1), torch.ones(1))


@torch.no_grad()
def _prefill_and_decode(model, ids, mask, pos):
    """Logits of a prefill of all but the last token, then one cached decode step."""
    cache = DynamicCache(config=model.config)
    first = model(ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], **cache_argument(cache)).logits
    second = model(ids[:, -1:], attention_mask=mask, position_ids=pos[:, -1:], **cache_argument(cache)).logits
    return first, second


@pytest.mark.parametrize("family", ["olmo2", "llama_gqa"])
def test_probe_without_request_or_only_recording_is_bit_identical_to_sdpa(family):
    model, _ = _models(family)
    ids, mask, pos = _padded_batch(model.config.vocab_size)
    sdpa = _prefill_and_decode(model, ids, mask, pos)
    with probing(model) as probe:
        assert model.config._attn_implementation == PROBE_IMPLEMENTATION
        idle = _prefill_and_decode(model, ids, mask, pos)
        probe.request(record=range(model.config.num_hidden_layers))
        recording = _prefill_and_decode(model, ids, mask, pos)
    assert model.config._attn_implementation == "sdpa"
    for got in (idle, recording):  # exact: with nothing to edit the probe calls the same SDPA kernel on the same q/k/v
        assert all(torch.equal(a, b) for a, b in zip(got, sdpa))


@pytest.mark.parametrize("family", ["olmo2", "llama_gqa"])
def test_edit_recomputes_current_rows_as_weights_times_values(family):
    model, _ = _models(family)
    ids, mask, pos = _padded_batch(model.config.vocab_size)
    sdpa = _prefill_and_decode(model, ids, mask, pos)
    layers = range(model.config.num_hidden_layers)
    with probing(model) as probe:
        probe.request(edit=lambda layer, w: w, edit_layers=layers)  # identity edit: (softmax row) · V again
        same = _prefill_and_decode(model, ids, mask, pos)
        probe.request(edit=lambda layer, w: torch.roll(w, 1, dims=-1), edit_layers=[1])
        moved = _prefill_and_decode(model, ids, mask, pos)
    for got, want in zip(same, sdpa):
        assert_close_to_scale(got, want, 1e-5, what="logits")
    # only the current rows change: earlier prefill positions keep SDPA's logits exactly (their rows come from
    # the same SDPA call; row-wise matmuls and norms do not mix rows, and masked keys add exact zeros)
    assert torch.equal(moved[0][:, :-1], sdpa[0][:, :-1])
    assert not torch.allclose(moved[0][:, -1], sdpa[0][:, -1]) and not torch.allclose(moved[1], sdpa[1])


def test_install_checks_and_restores():
    model, eager = _models("llama_gqa")
    with pytest.raises(ValueError, match="wraps SDPA.*attn_implementation='eager'"):
        install_probe(eager)
    probe = install_probe(model)
    assert probe_of(model) is probe
    with pytest.raises(RuntimeError, match="already installed"):
        install_probe(model)
    with pytest.raises(ValueError, match="edit_layers given without an edit function"):
        probe.request(edit_layers=[0])
    remove_probe(model)
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError, match="no attention probe"):
        probe_of(model)
