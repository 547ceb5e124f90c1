"""The explicit prefill + decode loop: equals `model.generate`, batching, stop strings, padding, spans, lengths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from method_helpers import gqa_llama

from evaluation.generation import (
    DecodeSettings,
    TokenizedPrompt,
    collate,
    fit_to_length,
    generate,
    plan_batches,
    token_spans,
    tokenize_prompts,
)
from evaluation.methods import Method, MethodStack
from evaluation.model_loading import byte_tokenizer

PROMPTS = [
    "Document [1] alpha beta gamma.\nQuestion: which?\nAnswer:",
    "short",
    "A medium prompt, with some punctuation; and more words",
    "x" * 70,
]


def hf_greedy(model, tokenizer, prompts, max_new_tokens, **extra):
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, **extra)
    width = enc["input_ids"].shape[1]
    return [row[width:].tolist() for row in out], enc


def test_equals_generate_on_vanilla_llama(spread):
    tokenizer = byte_tokenizer()
    model = spread(gqa_llama(tokenizer, max_position_embeddings=512))
    expected, _ = hf_greedy(model, tokenizer, PROMPTS, 12)
    ours = generate(model, tokenizer, PROMPTS, DecodeSettings(max_new_tokens=12, batch_size=4))
    assert [o.token_ids for o in ours] == expected
    assert all(o.stop_reason == "length" and len(o.token_ids) == 12 for o in ours)


def test_equals_generate_on_repo_olmo2(tiny_lm):
    model, tokenizer = tiny_lm
    # RePoOlmo2ForCausalLM.forward takes **kwargs, so `generate` cannot see that it accepts position_ids
    # and would use pad-inclusive positions; pass HF's own cumsum positions explicitly.
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    positions = (enc["attention_mask"].cumsum(-1) - 1).masked_fill(enc["attention_mask"] == 0, 0)
    expected, _ = hf_greedy(model, tokenizer, PROMPTS, 10, position_ids=positions)
    ours = generate(model, tokenizer, PROMPTS, DecodeSettings(max_new_tokens=10, batch_size=4))
    assert [o.token_ids for o in ours] == expected


def test_batched_equals_unbatched_and_order_is_restored(tiny_lm):
    model, tokenizer = tiny_lm
    settings = DecodeSettings(max_new_tokens=8, batch_size=3)
    batched = generate(model, tokenizer, PROMPTS, settings)
    single = [generate(model, tokenizer, [p], settings)[0] for p in PROMPTS]
    assert [o.token_ids for o in batched] == [o.token_ids for o in single]
    assert [o.prompt_tokens for o in batched] == [len(p.encode()) for p in PROMPTS]


def test_left_padding_positions_and_item_spans_map_back_to_items():
    tokenizer = byte_tokenizer()
    prompts = ["Q:\nDoc één\nDoc two!\nA:", "Q:\nd1\nd2\nA:"]
    spans = [[[3, 10], [11, 19]], [[3, 5], [6, 8]]]
    tokenized = tokenize_prompts(tokenizer, prompts, spans)
    batch = collate(tokenized, tokenizer.pad_token_id)
    pad = batch.pad_lengths[1]
    assert batch.pad_lengths[0] == 0 and pad == len(prompts[0].encode()) - len(prompts[1].encode())
    assert batch.input_ids[1, :pad].eq(tokenizer.pad_token_id).all() and batch.attention_mask[1, :pad].eq(0).all()
    assert batch.position_ids[1, pad:].tolist() == list(range(batch.input_ids.shape[1] - pad))
    for row, prompt in enumerate(prompts):
        for (s, e), (cs, ce) in zip(batch.item_token_spans[row], spans[row]):
            assert tokenizer.decode(batch.input_ids[row, s:e]) == prompt[cs:ce]


def test_token_spans_with_multi_character_tokens_and_specials():
    # offsets of "<s> Hello world\nBye" tokenised as [<s>, "Hello", " world", "\n", "Bye"]
    offsets = [(0, 0), (0, 5), (5, 11), (11, 12), (12, 15)]
    assert token_spans(offsets, [[0, 11], [12, 15], [6, 8]]) == [(1, 3), (4, 5), (2, 3)]
    assert token_spans(offsets, [[15, 15]]) == [(5, 5)]


def test_plan_batches_sorts_by_length_longest_first():
    assert plan_batches([3, 9, 1, 9, 5], 2) == [[1, 3], [4, 0], [2]]


@dataclass
class ForceText(Method):
    """Test method: forces the tokens of `text` (then EOS if `eos`) through process_logits."""

    name: ClassVar[str] = "test_force_text"
    text: str = ""
    eos: bool = False

    def process_logits(self, step, logits, state):
        ids = list(self.text.encode())
        forced = ids[step] + 2 if step < len(ids) else (1 if self.eos else None)
        if forced is not None:
            logits = torch.full_like(logits, -1e9)
            logits[:, forced] = 0.0
        return logits


def test_stop_strings_cut_the_text_and_end_generation(tiny_lm):
    model, tokenizer = tiny_lm
    stack = MethodStack([ForceText(text="ab\ncd\nef")])
    out = generate(model, tokenizer, ["p1", "prompt 2"], DecodeSettings(max_new_tokens=20, stop_strings=("\n",)), stack)
    assert [o.text for o in out] == ["ab", "ab"] and all(o.stop_reason == "stop" for o in out)
    assert out[0].token_ids == [99, 100, 12]  # generation stopped at the step that completed the stop string
    multi = generate(model, tokenizer, ["p"], DecodeSettings(max_new_tokens=20, stop_strings=("xyz", "\ncd")), stack)
    assert multi[0].text == "ab" and len(multi[0].token_ids) == 5


def test_eos_ends_a_row_and_is_not_in_the_text(tiny_lm):
    model, tokenizer = tiny_lm
    stack = MethodStack([ForceText(text="hi", eos=True)])
    out = generate(model, tokenizer, ["a", "bbbb"], DecodeSettings(max_new_tokens=9, batch_size=2), stack)
    assert [(o.text, o.stop_reason, o.token_ids) for o in out] == [("hi", "eos", [106, 107])] * 2


def test_too_long_prompt_is_an_error_unless_truncation_is_asked(tiny_lm):
    model, tokenizer = tiny_lm
    prompt = "d" * 40 + "MIDDLE" + "e" * 40
    settings = DecodeSettings(max_new_tokens=4, max_length=54)
    with pytest.raises(ValueError, match="--truncate middle"):
        generate(model, tokenizer, [prompt], settings)
    out = generate(model, tokenizer, [prompt], DecodeSettings(max_new_tokens=4, max_length=54, truncate="middle"))
    assert out[0].truncated and out[0].prompt_tokens == 50
    short = generate(model, tokenizer, ["ok"], settings)
    assert not short[0].truncated


def test_truncation_keeps_edges_and_remaps_item_spans():
    prompt = TokenizedPrompt(tuple(range(10)), ((0, 2), (3, 6), (8, 10)))
    middle = fit_to_length([prompt], 6, "middle")[0]
    assert middle.input_ids == (0, 1, 2, 7, 8, 9) and middle.truncated
    assert middle.item_spans == ((0, 2), (3, 3), (4, 6))
    left = fit_to_length([prompt], 6, "left")[0]
    assert left.input_ids == (4, 5, 6, 7, 8, 9) and left.item_spans == ((0, 0), (0, 2), (4, 6))


def test_settings_validate():
    with pytest.raises(ValueError, match="truncate"):
        DecodeSettings(truncate="right")
    with pytest.raises(TypeError, match="tuple"):
        DecodeSettings(stop_strings="\n")
