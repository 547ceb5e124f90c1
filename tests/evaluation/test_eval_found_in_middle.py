"""Found-in-the-Middle: Attn and rel by hand, the batched dummy passes, redistribution, the cache."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from float_checks import assert_close_to_scale

from evaluation.attention_probe import probe_of, probing
from evaluation.generation import DecodeSettings, TokenizedPrompt, collate, generate_batch, tokenize_prompts
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.found_in_middle import (
    FoundInTheMiddle,
    calibrate_documents,
    calibrated_relevance,
    calibration_weights,
    document_attention,
    document_index,
    document_masses,
    dummy_variants,
    redistribute,
    resolve_layers,
)
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt

# -- Attn(x, k) and rel by hand ----------------------------------------------------------------------------------

# One prompt of 7 tokens: token 0 and 6 outside documents, document 0 = tokens 1-2, document 1 = tokens 3-5.
SPANS = [[(1, 3), (3, 6)]]
# Current-query rows [layer][head][key] of 2 layers x 2 heads.
ROWS = [
    [[0.10, 0.20, 0.10, 0.05, 0.05, 0.20, 0.30], [0.30, 0.00, 0.20, 0.10, 0.10, 0.10, 0.20]],
    [[0.20, 0.10, 0.10, 0.20, 0.10, 0.00, 0.30], [0.10, 0.30, 0.10, 0.10, 0.10, 0.10, 0.20]],
]


def test_document_attention_is_the_token_head_layer_mean_written_out():
    # Attn(x, k) = 1/(layers*heads) * sum_l sum_h (1/N_k) * sum_{i in doc k} w[l][h][i]
    doc0 = ((0.20 + 0.10) / 2 + (0.00 + 0.20) / 2 + (0.10 + 0.10) / 2 + (0.30 + 0.10) / 2) / 4
    doc1 = ((0.05 + 0.05 + 0.20) / 3 + (0.10 + 0.10 + 0.10) / 3 + (0.20 + 0.10 + 0.00) / 3 + (0.1 + 0.1 + 0.1) / 3) / 4
    rows = [torch.tensor([layer]) for layer in ROWS]  # each [B=1, H=2, K=7]
    got = document_attention(rows, document_index(SPANS, 7), 2)
    torch.testing.assert_close(got, torch.tensor([[doc0, doc1]]), atol=1e-7, rtol=0)
    # rows already averaged over heads give the same
    torch.testing.assert_close(document_attention([r.mean(1) for r in rows], document_index(SPANS, 7), 2), got)


def test_relevance_subtracts_the_dummy_attention_of_the_same_slot():
    # The real prompt, then the dummy in slot 0 and in slot 1 (one layer, one head each, already averaged).
    real = torch.tensor([[0.1, 0.2, 0.1, 0.1, 0.1, 0.1, 0.3]])
    dummy_in_0 = torch.tensor([[0.1, 0.3, 0.3, 0.0, 0.0, 0.0, 0.3]])  # dummy span (1, 3)
    dummy_in_1 = torch.tensor([[0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3]])  # dummy span (3, 6)
    index = document_index(SPANS, 7)
    attn = document_attention([real], index, 2)  # Attn(x_0, 0) = 0.15, Attn(x_1, 1) = 0.1
    dummy = torch.stack(
        [document_attention([dummy_in_0], index, 2)[0, 0], document_attention([dummy_in_1], index, 2)[0, 1]]
    )[None]  # Attn(x_dum, 0) = 0.3, Attn(x_dum, 1) = 0.1
    torch.testing.assert_close(calibrated_relevance(attn, dummy), torch.tensor([[0.15 - 0.3, 0.1 - 0.1]]))


def test_dummy_replaces_document_k_and_shifts_later_spans():
    prompt = TokenizedPrompt((9, 1, 2, 3, 4, 5, 9), ((1, 3), (3, 6)))
    variants = dummy_variants(prompt, [[70], [80, 81, 82, 83]])
    assert variants[0] == (0, TokenizedPrompt((9, 70, 3, 4, 5, 9), ((1, 2), (2, 5))))
    assert variants[1] == (1, TokenizedPrompt((9, 1, 2, 80, 81, 82, 83, 9), ((1, 3), (3, 7))))
    empty = TokenizedPrompt((9, 1, 9), ((1, 2), (2, 2)))  # a truncated-away document gets no pass
    assert [k for k, _ in dummy_variants(empty, [[7], [7]])] == [0]


def test_layer_specs():
    assert resolve_layers("last_half", 32) == list(range(16, 32))
    assert resolve_layers("all", 4) == [0, 1, 2, 3] and resolve_layers("none", 4) == []
    assert resolve_layers("last_1", 4) == [3] and resolve_layers("first_2", 4) == [0, 1]
    assert resolve_layers("1-2", 4) == [1, 2] and resolve_layers(3, 4) == [3]
    for bad in ("last_9", "2-1", "4", "middle"):
        with pytest.raises(ValueError, match="bad layer spec"):
            resolve_layers(bad, 4)


# -- α and redistribution ------------------------------------------------------------------------------------------


def test_alpha_is_uniform_for_equal_relevance_or_large_temperature():
    equal = torch.full((2, 4), 3e-4)
    torch.testing.assert_close(calibration_weights(equal, 5e-5), torch.full((2, 4), 0.25))
    spread = torch.tensor([[1e-4, -2e-4, 5e-4, 0.0]])
    torch.testing.assert_close(calibration_weights(spread, 1e3), torch.full((1, 4), 0.25))
    sharp = calibration_weights(spread, 5e-5)
    assert sharp.argmax().item() == 2 and sharp.max() > 0.9
    valid = torch.tensor([[True, True, False, True]])
    masked = calibration_weights(spread, 1e3, valid)
    torch.testing.assert_close(masked, torch.tensor([[1 / 3, 1 / 3, 0.0, 1 / 3]]))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        calibration_weights(spread, 0.0)


TOPICS = ["rivers of the north", "a king of the old city", "the music of the year", "a war film"]


def _mdqa_rows(examples: int = 2, gold: int = 1) -> list[dict]:
    """Short MDQA rows (3 documents, a few hundred byte tokens) in the task's prompt format."""
    rows = []
    for i in range(examples):
        docs = [Passage(f"Topic {i}{j}", f"A short passage on {TOPICS[(i + j) % 4]}, number {j}.") for j in range(3)]
        prompt, spans = build_mdqa_prompt(f"what is passage {gold} of set {i} about?", docs)
        rows.append(
            dict(
                id=f"r{i}",
                prompt=prompt,
                item_spans=spans,
                doc_titles=[d.title for d in docs],
                question=f"what is passage {gold} of set {i} about?",
                gold_position=gold,
            )
        )
    return rows


@pytest.mark.parametrize("target", ["mass", "mean"])
@torch.no_grad()
def test_redistributed_row_has_alpha_masses_and_keeps_the_rest(tiny_lm, target):
    model, tokenizer = tiny_lm
    rows = _mdqa_rows()
    prompts = tokenize_prompts(tokenizer, [r["prompt"] for r in rows], [r["item_spans"] for r in rows])
    batch = collate(prompts, tokenizer.pad_token_id)
    index = document_index(batch.item_token_spans, batch.input_ids.shape[1])
    alpha = torch.tensor([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    with probing(model) as probe:
        probe.request(record=[2, 3], edit=lambda layer, w: redistribute(w, index, alpha, target), edit_layers=[2, 3])
        model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
        for layer in (2, 3):
            before, after = probe.rows[layer], probe.edited_rows[layer]  # [B, H, 1, K]
            m_before, m_after = document_masses(before, index, 3), document_masses(after, index, 3)
            outside = (index < 0).view(2, 1, 1, -1).expand_as(before)
            assert torch.equal(after[outside], before[outside])  # weights outside documents untouched
            # masses are probabilities (scale 1), summed over ~300 keys
            total_after, total_before = m_after[..., :3].sum(-1), m_before[..., :3].sum(-1)
            assert_close_to_scale(total_after, total_before, 1e-5, scale=1.0, what="total on documents")
            assert_close_to_scale(after.sum(-1), torch.ones_like(after.sum(-1)), 1e-5, scale=1.0, what="row sums")
            per_doc = m_after[..., :3]
            if target == "mean":  # per-token means ∝ α (Eq. 6): divide the masses by the token counts
                counts = document_masses(torch.ones_like(index, dtype=torch.float), index, 3)[:, :3]
                per_doc = per_doc / counts.view(2, 1, 1, 3)
            share = per_doc / per_doc.sum(-1, keepdim=True)
            assert_close_to_scale(share, alpha.view(2, 1, 1, 3).expand_as(share), 1e-5, scale=1.0, what="shares")


# -- the batched dummy passes ------------------------------------------------------------------------------------


@torch.no_grad()
def _single_attention(model, prompt: TokenizedPrompt, layers):
    """Attn(x, ·) of one prompt from its own unbatched forward."""
    with probing(model) as probe:
        probe.request(record=layers)
        model(torch.tensor([prompt.input_ids]))
        rows = [probe.rows[layer][:, :, -1] for layer in layers]
    return document_attention(rows, document_index([prompt.item_spans], len(prompt.input_ids)), 3)[0]


def test_batched_calibration_equals_one_forward_per_dummy_position(tiny_lm):
    model, tokenizer = tiny_lm
    rows = _mdqa_rows()
    prompts = tokenize_prompts(tokenizer, [r["prompt"] for r in rows], [r["item_spans"] for r in rows])
    dummy = [[tokenizer(f"Document [{k + 1}](Title: N/A) N/A")["input_ids"] for k in range(3)] for _ in prompts]
    layers = [0, 1, 2, 3]
    with probing(model) as probe:
        batched = calibrate_documents(model, probe, prompts, layers, tokenizer.pad_token_id, dummy)
        chunked = calibrate_documents(model, probe, prompts, layers, tokenizer.pad_token_id, dummy, chunk_size=3)
    for b, prompt in enumerate(prompts):
        expected_attn = _single_attention(model, prompt, layers)
        expected_dummy = torch.stack(
            [_single_attention(model, v, layers)[k] for k, v in dummy_variants(prompt, dummy[b])]
        )
        # padded batch vs one prompt alone: different float paths. One scale for all three: the relevance is a
        # difference of attentions and carries their error, however small it is itself.
        scale = max(expected_attn.abs().max().item(), expected_dummy.abs().max().item())
        for result in (batched, chunked):
            assert_close_to_scale(result.attention[b], expected_attn, 1e-5, scale=scale, what="Attn")
            assert_close_to_scale(result.dummy_attention[b], expected_dummy, 1e-5, scale=scale, what="dummy Attn")
            want = expected_attn - expected_dummy
            assert_close_to_scale(result.relevance[b], want, 1e-5, scale=scale, what="relevance")


# -- the method in generation ----------------------------------------------------------------------------------------


@dataclass
class LogitRecorder(Method):
    """Test helper (not registered): keeps the logits of every step."""

    steps: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.steps.append(logits.clone())
        return logits


def test_redistributed_generation_with_cache_equals_recomputation(tiny_lm):
    model, tokenizer = tiny_lm
    rows = _mdqa_rows()
    prompts = tokenize_prompts(tokenizer, [r["prompt"] for r in rows], [r["item_spans"] for r in rows])
    batch = collate(prompts, tokenizer.pad_token_id)
    settings = DecodeSettings(max_new_tokens=4, batch_size=2)
    plain = LogitRecorder()
    generate_batch(model, tokenizer, batch, settings, MethodStack([plain]))
    fim, recorder = build_method("fim:temperature=5e-5,layers=last_half"), LogitRecorder()
    stack = MethodStack([fim, recorder])
    with stack.attached(model, tokenizer):
        outputs = generate_batch(model, tokenizer, batch, settings, stack)
        steps = len(recorder.steps)
        assert steps == 4 and not torch.allclose(recorder.steps[0], plain.steps[0])  # the edit does change answers
        # One forward over prompt + generated tokens, with every "current" row (the last prompt token and
        # each generated token) edited as the cached steps did.
        generated = torch.tensor([o.token_ids + [0] * (steps - len(o.token_ids)) for o in outputs])
        ids = torch.cat([batch.input_ids, generated[:, : steps - 1]], dim=1)
        mask = torch.cat([batch.attention_mask, torch.ones_like(generated[:, : steps - 1])], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        index = document_index(batch.item_token_spans, batch.input_ids.shape[1])
        alpha = fim.last_calibration.alpha
        probe = probe_of(model)
        probe.request(edit=lambda layer, w: redistribute(w, index, alpha, "mean"), edit_layers=[2, 3], query_rows=steps)
        with torch.no_grad():
            logits = model(ids, attention_mask=mask, position_ids=positions).logits[:, -steps:].float()
        probe.clear()
    assert model.config._attn_implementation == "sdpa"
    for step in range(steps):
        assert_close_to_scale(logits[:, step], recorder.steps[step], 2e-5, what=f"logits of step {step}")


def test_method_spec_and_errors(tiny_lm):
    model, tokenizer = tiny_lm
    fim = build_method("fim:temperature=5e-5,layers=last_half")
    assert isinstance(fim, FoundInTheMiddle) and fim.spec().startswith("fim:temperature=5e-05,layers=last_half")
    with pytest.raises(ValueError, match="target must be one of"):
        build_method("fim:target=sum")
    with pytest.raises(ValueError, match="bad layer spec"):
        MethodStack.parse("fim:layers=9").attached(model, tokenizer).__enter__()
    assert model.config._attn_implementation == "sdpa"
    no_spans = collate(tokenize_prompts(tokenizer, ["no documents here"]), tokenizer.pad_token_id)
    stack = MethodStack([FoundInTheMiddle()])
    with stack.attached(model, tokenizer), pytest.raises(ValueError, match="needs the token span of each document"):
        generate_batch(model, tokenizer, no_spans, DecodeSettings(max_new_tokens=2), stack)
    assert model.config._attn_implementation == "sdpa"
