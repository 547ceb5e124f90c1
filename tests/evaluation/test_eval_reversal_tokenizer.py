"""The reversal task's word-level tokenizer: round trip, stable ids, unknown words, save/load, harness scoring."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from evaluation.tasks.reversal import VOCABULARY, build_reversal_prompt, reversal_exact_match, reversed_answer
from evaluation.tasks.reversal_tokenizer import (
    SPECIAL_TOKENS,
    reversal_tokenizer,
    reversal_vocabulary,
    template_tokens,
    unknown_words,
)

WORDS = ["lamp", "river", "stone"]


def test_round_trip_of_prompt_and_answer():
    tokenizer = reversal_tokenizer()
    prompt, _ = build_reversal_prompt(WORDS)
    answer = " " + reversed_answer(WORDS)
    ids = tokenizer(prompt + answer, add_special_tokens=False)["input_ids"]
    # one token per word and punctuation mark; newlines and spaces are separators only
    assert tokenizer.convert_ids_to_tokens(ids) == [
        "Reverse", "the", "order", "of", "the", "words", ".", "Words", ":", "lamp", "river", "stone",
        "Reversed", ":", "stone", "river", "lamp",
    ]  # fmt: skip
    assert (
        tokenizer.decode(ids) == "Reverse the order of the words . Words : lamp river stone Reversed : stone river lamp"
    )
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(answer_ids + [tokenizer.eos_token_id], skip_special_tokens=True) == "stone river lamp"
    assert reversal_exact_match(tokenizer.decode(answer_ids), [reversed_answer(WORDS)]) == 1.0
    assert tokenizer.unk_token_id not in ids


def test_ids_are_stable():
    vocab = reversal_vocabulary()
    assert [vocab[t] for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert template_tokens() == ("Reverse", "the", "order", "of", "words", ".", "Words", ":", "Reversed")
    assert vocab["Reverse"] == 3 and vocab["Reversed"] == 11
    assert [vocab[w] for w in VOCABULARY] == list(range(12, 12 + len(VOCABULARY)))
    tokenizer = reversal_tokenizer()
    assert len(tokenizer) == 12 + len(VOCABULARY)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert tokenizer("lamp river")["input_ids"] == [12, 13]  # no BOS/EOS added


def test_unknown_word_becomes_unk_and_is_listed():
    tokenizer = reversal_tokenizer()
    ids = tokenizer("lamp spaceship river", add_special_tokens=False)["input_ids"]
    assert ids[1] == tokenizer.unk_token_id and tokenizer.convert_ids_to_tokens(ids[1]) == "<unk>"
    assert unknown_words(tokenizer, "Words: lamp spaceship river Lamp") == ["spaceship", "Lamp"]
    assert unknown_words(tokenizer, build_reversal_prompt(list(VOCABULARY[:30]))[0]) == []


def test_save_and_load_gives_the_same_tokenizer(tmp_path):
    tokenizer = reversal_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    prompt, _ = build_reversal_prompt(WORDS)
    assert loaded(prompt)["input_ids"] == tokenizer(prompt)["input_ids"]
    assert (loaded.pad_token_id, loaded.eos_token_id) == (0, 1)
    assert loaded.decode(loaded(" stone river lamp")["input_ids"]) == "stone river lamp"
    # offsets map tokens back to characters (the harness's item spans need them)
    offsets = loaded(prompt, return_offsets_mapping=True)["offset_mapping"]
    assert [prompt[a:b] for a, b in offsets][9:12] == WORDS


def test_custom_vocabulary_and_errors():
    tokenizer = reversal_tokenizer(["alpha", "beta", "alpha"])
    assert len(tokenizer) == 12 + 2 and tokenizer.convert_tokens_to_ids("beta") == 13
    with pytest.raises(ValueError, match="not a single word"):
        reversal_vocabulary(["two words"])
