"""Text reversal: prompt text, rows per length, exact-match scoring, training sequences, errors."""

from __future__ import annotations

import pytest

from evaluation.model_loading import byte_tokenizer
from evaluation.tasks import build_task
from evaluation.tasks.reversal import (
    VOCABULARY,
    build_reversal_prompt,
    reversal_exact_match,
    reversal_training_sequences,
)


def test_prompt_answer_and_word_spans():
    prompt, spans = build_reversal_prompt(["lamp", "river", "stone"])
    assert prompt == "Reverse the order of the words.\nWords: lamp river stone\nReversed:"
    assert [prompt[s:e] for s, e in spans] == ["lamp", "river", "stone"]


def test_rows_cover_every_length():
    ds = build_task("reversal", num_examples=2, min_length=2, max_length=5).build()
    assert len(ds) == 4 * 2 and len(set(ds["id"])) == len(ds)
    for row in ds:
        words = row["words"]
        assert len(words) == row["length"] == row["gold_position"] + 2 and row["num_positions"] == 4
        assert len(set(words)) == len(words)
        assert row["answers"] == [" ".join(reversed(words))]
        assert row["prompt"] == build_reversal_prompt(words)[0]
    assert build_task("reversal", num_examples=1).build()["length"] == list(range(2, 31))  # test range 2-30


def test_deterministic_by_seed():
    a = build_task("reversal", num_examples=2, max_length=6, seed=5).build()
    assert a.to_list() == build_task("reversal", num_examples=2, max_length=6, seed=5).build().to_list()
    assert a["words"] != build_task("reversal", num_examples=2, max_length=6, seed=6).build()["words"]


def test_exact_match():
    assert reversal_exact_match(" stone river lamp", ["stone river lamp"]) == 1.0
    assert reversal_exact_match("stone  river\tlamp", ["stone river lamp"]) == 1.0
    assert reversal_exact_match("stone river lamp.", ["stone river lamp"]) == 0.0
    assert reversal_exact_match("Stone river lamp", ["stone river lamp"]) == 0.0
    assert reversal_exact_match("stone river", ["stone river lamp"]) == 0.0


def test_vocabulary_is_distinct_single_words_without_articles():
    assert len(set(VOCABULARY)) == len(VOCABULARY) >= 30
    assert all(w.isalpha() and w.islower() for w in VOCABULARY)
    assert not {"a", "an", "the"} & set(VOCABULARY)


def test_training_sequences_mask_the_prompt():
    tokenizer = byte_tokenizer()
    sequences = reversal_training_sequences(tokenizer, num_sequences=20, min_length=2, max_length=20, seed=0)
    assert len(sequences) == 20
    lengths = set()
    for item in sequences:
        ids, labels = item["input_ids"], item["labels"]
        assert len(ids) == len(labels) and ids[-1] == tokenizer.eos_token_id
        cut = labels.count(-100)
        assert labels[:cut] == [-100] * cut and labels[cut:] == ids[cut:]
        prompt = tokenizer.decode(ids[:cut])
        words = prompt.split("Words: ")[1].split("\n")[0].split()
        lengths.add(len(words))
        assert tokenizer.decode(ids[cut:-1]) == " " + " ".join(reversed(words))
        assert prompt == build_reversal_prompt(words)[0]
    assert min(lengths) >= 2 and max(lengths) <= 20 and len(lengths) > 5
    assert reversal_training_sequences(tokenizer, 3, seed=1) == reversal_training_sequences(tokenizer, 3, seed=1)


def test_errors():
    with pytest.raises(ValueError, match="pass num_examples"):
        build_task("reversal")
    with pytest.raises(ValueError, match="min_length=9 > max_length=4"):
        build_task("reversal", num_examples=1, min_length=9, max_length=4)
    with pytest.raises(ValueError, match="exceeds the vocabulary"):
        build_task("reversal", num_examples=1, max_length=5000)
    with pytest.raises(ValueError, match="num_sequences must be an int >= 1"):
        reversal_training_sequences(byte_tokenizer(), 0)
