"""LongBench: templates, per-dataset metrics on hand-computed cases, length filter, positions, errors.

The fixtures under tests/fixtures/longbench are written for these tests in LongBench's line format
(no benchmark data).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.model_loading import byte_tokenizer
from evaluation.tasks import build_task
from evaluation.tasks.longbench import (
    MAX_NEW_TOKENS,
    METRIC_OF,
    PROMPTS,
    classification_score,
    code_similarity,
    count_score,
    retrieval_score,
)

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "longbench"


def lb(name: str, **kw):
    return build_task("longbench", path=str(DATA / f"{name}.jsonl"), **kw)


def test_hotpotqa_prompt_byte_for_byte():
    row = lb("hotpotqa").build()[0]
    assert row["prompt"] == (
        "Answer the question based on the given passages. Only give me the answer and do not output any other "
        "words.\n\nThe following are given passages.\nPassage 1:\nThe copper kettle was invented by Ada Brenn in "
        "the town of Eastwick.\nPassage 2:\nLater in life, Ada Brenn moved to Harrowgate, where she opened a "
        "foundry.\n\nAnswer the question based on the given passages. Only give me the answer and do not output "
        "any other words.\n\nQuestion: Which town did the inventor of the copper kettle move to?\nAnswer:"
    )
    s, e = row["item_spans"][0]
    assert row["prompt"][s:e].startswith("Passage 1:") and row["prompt"][s:e].endswith("a foundry.")
    assert (row["gold_position"], row["num_positions"], row["dataset"]) == (0, 1, "hotpotqa")


def test_other_templates_byte_for_byte():
    assert lb("lcc").build()[0]["prompt"] == (
        "Please complete the code given below. \ndef add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n"
        "Next line of code:\n"
    )
    assert lb("trec").build()[0]["prompt"] == (
        "Please determine the type of the question below. Here are some examples of questions.\n\n"
        "Question: Who painted the blue door?\nType: Individual\nQuestion: How far is the moon?\nType: Distance, "
        "linear measure\nQuestion: What city hosts the largest clock tower?\nType:"
    )
    assert PROMPTS["gov_report"].startswith("You are given a report by a government agency. Write a one-page summary")
    assert set(PROMPTS) == set(MAX_NEW_TOKENS) == set(METRIC_OF) and len(PROMPTS) == 16


def test_passage_retrieval_positions():
    row = lb("passage_retrieval_en").build()[0]
    assert row["gold_position"] == 1 and row["num_positions"] == 3
    items = [row["prompt"][s:e] for s, e in row["item_spans"]]
    assert items == [
        "Paragraph 1: The mountain pass is closed in winter.",
        "Paragraph 2: Portcove is a harbour town where lanterns line every street.",
        "Paragraph 3: The desert road crosses two dry rivers.",
    ]


def test_metrics_on_hand_computed_cases():
    hotpot = lb("hotpotqa")
    # "in harrowgate town" vs "harrowgate": P = 1/3, R = 1 -> F1 = 0.5
    assert hotpot.score("In Harrowgate town.", ["Harrowgate"]) == pytest.approx(0.5)
    assert hotpot.metric_name == "longbench_token_f1"
    # ROUGE-L: LCS("cat sat on mat", "cat sat mat") = 3 -> P = 3/4, R = 1, F = 6/7
    assert lb("gov_report").score("cat sat on mat", ["cat sat mat"]) == pytest.approx(6 / 7)
    assert count_score("I count 3, maybe 4", "3") == 0.5 and count_score("none", "3") == 0.0
    assert retrieval_score("Paragraph 2", "Paragraph 2") == 1.0 and retrieval_score("2 or 12", "Paragraph 2") == 0.5
    assert code_similarity("# comment\n    return a * b\nmore", "    return a * b") == 1.0
    assert code_similarity("abcd", "abce") == pytest.approx(0.75)
    classes = ["City", "Individual", "Country"]
    assert classification_score("City", "City", classes) == 1.0
    assert classification_score("City or Country", "City", classes) == 0.5
    assert classification_score("Individual", "City", classes) == 0.0
    trec = lb("trec")
    assert trec.score("\nCity\nIndividual", ["City"]) == 1.0  # first non-empty line only (few-shot rule)
    assert trec.generation_defaults() == (64, ("\n",)) and hotpot.generation_defaults() == (32, ())


def test_length_filter_by_field_and_by_tokens():
    assert len(lb("hotpotqa").build()) == 3
    assert lb("hotpotqa", max_length=100).build()["source_index"] == [0, 1]  # `length` field (words)
    byte = byte_tokenizer()
    short = lb("hotpotqa", max_length=600, tokenizer=byte).build()
    assert short["source_index"] == [0, 1]
    assert all(n == len(p.encode()) <= 600 for n, p in zip(short["prompt_tokens"], short["prompt"]))
    with pytest.raises(ValueError, match=r"num_examples=3 but .* has only 2"):
        lb("hotpotqa", max_length=100, num_examples=3).build()


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="LongBench file"):
        build_task("longbench", path=str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="unknown LongBench dataset 'lsht'"):
        lb("hotpotqa", dataset="lsht")
    mixed = tmp_path / "mixed.jsonl"
    lines = [dict(input="q", context="c", answers=["a"], dataset=d) for d in ("hotpotqa", "musique")]
    mixed.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(ValueError, match="pass dataset= to choose a template"):
        build_task("longbench", path=str(mixed)).build()
    assert len(build_task("longbench", path=str(mixed), dataset="musique").build()) == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(dict(input="q", answers=["a"], dataset="hotpotqa")) + "\n")
    with pytest.raises(ValueError, match=r"missing field\(s\) \['context'\]"):
        build_task("longbench", path=str(broken)).build()
