"""ZeroSCROLLS / L-Eval style tasks: field mappings, prompts, open and closed metrics, errors.

The fixtures under tests/fixtures/scrolls are written for these tests in the benchmarks' line formats.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evaluation.tasks import build_task
from evaluation.tasks.scrolls import choice_accuracy, choice_letters, open_scores

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "scrolls"


def task(name: str, **kw):
    return build_task("scrolls", path=str(DATA / f"{name}.jsonl"), **kw)


def test_plain_prompt_byte_for_byte():
    rows = task("plain_open").build()
    assert rows[0]["prompt"] == (
        "Read the document below, then answer.\n\nDocument:\nThe committee met twice. It approved the new budget and "
        "postponed the vote on the park.\n\nInstruction: Summarize the meeting.\nAnswer:"
    )
    assert rows[1]["answers"] == ["corn"]  # the string field 'answer'
    for row in rows:
        s, e = row["item_spans"][0]
        assert row["prompt"][s:e].startswith(("The committee", "Tessa")) and row["prompt"][e:].startswith("\n\n")
    custom = task("plain_open", template="Q: {question}\nDoc: {context}\nA:").build()[1]
    assert custom["prompt"] == (
        "Q: What did Tessa plant in the south field?\nDoc: Tessa planted beans in the north field and corn in the "
        "south field.\nA:"
    )
    s, e = custom["item_spans"][0]
    assert custom["prompt"][s:e] == "Tessa planted beans in the north field and corn in the south field."


def test_zeroscrolls_input_is_used_as_released():
    (row,) = task("zeroscrolls", format="zeroscrolls").build()
    line = json.loads((DATA / "zeroscrolls.jsonl").read_text())
    assert row["prompt"] == line["input"] and row["id"] == "zs-1" and row["answers"] == ["every ship that passed"]
    s, e = row["item_spans"][0]
    assert row["prompt"][s:e] == "The lighthouse keeper kept a log of every ship that passed."
    assert row["question"].startswith("Question: What did the keeper record?")


def test_leval_one_row_per_instruction_and_closed_metrics():
    t = task("leval_closed", format="leval", kind="closed", metric="choice_accuracy")
    rows = t.build()
    assert [r["answers"] for r in rows] == [["C"], ["ACD"]] and rows[1]["id"].endswith("-q01")
    assert rows[0]["prompt"].startswith(
        "You are given a long document. Follow the instruction that comes after it. For a multiple-choice "
        "question, reply only with the letter or letters of the correct options.\n\nDocument:\nThe orchard"
    )
    assert rows[0]["prompt"].endswith("D. cherry\nAnswer:")
    assert t.score("C", ["C"]) == 1.0 and t.score("(C) plum", ["C"]) == 1.0 and t.score("B", ["C"]) == 0.0
    assert t.score("A, C and D.", ["ACD"]) == 1.0 and t.score("ACD", ["ACD"]) == 1.0 and t.score("AC", ["ACD"]) == 0.0
    assert t.generation_defaults() == (32, ("\n",))
    exact = task("leval_closed", format="leval", kind="closed")
    assert exact.metric_name == "exact_match" and exact.score("c.", ["C"]) == 1.0
    assert exact.score_all("C", ["C"]) == {"exact_match": 1.0, "choice_accuracy": 1.0}


def test_choice_letters():
    assert (
        choice_letters("B") == {"B"}
        and choice_letters("(B) because") == {"B"}
        and choice_letters("ABD") == {"A", "B", "D"}
    )
    assert choice_letters("The answer is B and D.") == {"B", "D"}
    assert choice_letters("") == frozenset()
    with pytest.raises(ValueError, match="option-letter answers"):
        choice_accuracy("B", ["plum"])


def test_open_metrics_hand_computed():
    scores = open_scores("the cat sat", ["the cat sat on the mat"])
    # unigrams: 3 shared of 3 predicted / 6 reference -> P = 1, R = 1/2, F = 2/3 (ROUGE keeps "the")
    assert scores["rouge1"] == pytest.approx(2 / 3)
    # bigrams: "the cat", "cat sat" shared: P = 2/2, R = 2/5 -> F = 4/7
    assert scores["rouge2"] == pytest.approx(4 / 7)
    assert scores["rougeL"] == pytest.approx(2 / 3)
    assert scores["rouge_geo"] == pytest.approx(math.prod([2 / 3, 4 / 7, 2 / 3]) ** (1 / 3))
    # SQuAD F1 drops "the": pred {cat, sat}, gold {cat, sat, on, mat} -> P = 1, R = 1/2, F = 2/3
    assert scores["token_f1"] == pytest.approx(2 / 3)
    t = task("plain_open")
    assert t.metric_name == "rougeL" and t.score("the cat sat", ["the cat sat on the mat"]) == pytest.approx(2 / 3)
    assert task("plain_open", metric="rouge2").score("the cat sat", ["the cat sat on the mat"]) == pytest.approx(4 / 7)
    assert t.generation_defaults() == (512, ())


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown format 'scrolls'"):
        task("plain_open", format="scrolls")
    with pytest.raises(ValueError, match="does not fit kind='open'"):
        task("plain_open", metric="exact_match")
    with pytest.raises(ValueError, match="needs 'input' \\(the released prompt\\)"):
        task("plain_open", format="zeroscrolls").build()
    with pytest.raises(ValueError, match="template must contain"):
        task("plain_open", template="no document here")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "doc", "instructions": ["q1", "q2"], "outputs": ["a"]}) + "\n")
    with pytest.raises(ValueError, match="2 instructions but 1 outputs"):
        build_task("scrolls", path=str(bad), format="leval").build()
    bad.write_text(json.dumps({"context": "doc", "question": "q"}) + "\n")
    with pytest.raises(ValueError, match="no gold answer"):
        build_task("scrolls", path=str(bad)).build()
    with pytest.raises(FileNotFoundError, match="data file"):
        build_task("scrolls", path=str(tmp_path / "none.jsonl"))
