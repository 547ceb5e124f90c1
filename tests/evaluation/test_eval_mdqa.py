"""Multi-document QA: prompt format, gold placement, spans, grids, determinism, release reader, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evaluation.tasks.base import resolve_gold_positions
from evaluation.tasks.mdqa import MDQAReleaseTask, MDQATask, Passage, build_mdqa_prompt

EXPECTED_3_DOCS = (
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant).\n"
    "\n"
    "Document [1](Title: Alpha) First passage.\n"
    "Document [2](Title: Paris) Paris is the capital of France.\n"
    "Document [3](Title: Gamma) Third {passage}.\n"
    "\n"
    "Question: what is the capital of france\n"
    "Answer:"
)


def write_jsonl_gz(path: Path, rows: list[dict]) -> str:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return str(path)


def oracle_line(question: str, answer: str, title: str, text: str) -> dict:
    ctx = {"title": title, "text": text, "hasanswer": True, "isgold": True}
    return {"question": question, "answers": [answer], "ctxs": [ctx]}


def fixture_gold_texts(path: str) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["ctxs"][0]["text"] for line in handle]


def test_prompt_format_byte_for_byte() -> None:
    docs = [
        Passage("Alpha", "First passage."),
        Passage("Paris", "Paris is the capital of France."),
        Passage("Gamma", "Third {passage}."),
    ]
    prompt, spans = build_mdqa_prompt("what is the capital of france", docs)
    assert prompt == EXPECTED_3_DOCS
    assert [prompt[s:e] for s, e in spans] == [
        "Document [1](Title: Alpha) First passage.",
        "Document [2](Title: Paris) Paris is the capital of France.",
        "Document [3](Title: Gamma) Third {passage}.",
    ]


def test_release_reader_matches_literal_prompt(tmp_path: Path) -> None:
    ctxs = [
        {"title": "Alpha", "text": "First passage.", "hasanswer": False, "isgold": False},
        {"title": "Paris", "text": "Paris is the capital of France.", "hasanswer": True, "isgold": True},
        {"title": "Gamma", "text": "Third {passage}.", "hasanswer": False, "isgold": False},
    ]
    lines = [
        {"question": "what is the capital of france", "answers": ["Paris"], "ctxs": ctxs},
        {"question": "q2", "answers": ["x", "y"], "ctxs": ctxs},
    ]
    path = write_jsonl_gz(tmp_path / "nq-open-3_total_documents_gold_at_1.jsonl.gz", lines)
    ds = MDQAReleaseTask(path=path).build()
    assert len(ds) == 2
    row = ds[0]
    assert row["prompt"] == EXPECTED_3_DOCS
    assert (row["gold_position"], row["num_positions"], row["task"]) == (1, 3, "mdqa")
    assert row["id"] == "mdqa-release-k3-q00000-pos001"
    assert row["answers"] == ["Paris"] and ds[1]["answers"] == ["x", "y"]
    assert row["doc_titles"] == ["Alpha", "Paris", "Gamma"] and row["gold_title"] == "Paris"
    assert len(MDQAReleaseTask(path=path, num_examples=1).build()) == 1

    no_gold = [{"question": "q", "answers": ["b"], "ctxs": [{**c, "isgold": False} for c in ctxs]}]
    bad = write_jsonl_gz(tmp_path / "nq-open-3_total_documents_gold_at_0.jsonl.gz", no_gold)
    with pytest.raises(ValueError, match=r"expected exactly one document with isgold=true, found 0"):
        MDQAReleaseTask(path=bad).build()


def test_gold_at_every_index_k10(nq_oracle_path: str) -> None:
    k = 10
    ds = MDQATask(path=nq_oracle_path, num_documents=k, gold_positions="all", num_examples=3, seed=0).build()
    assert len(ds) == 3 * k
    gold_texts = fixture_gold_texts(nq_oracle_path)
    for question in range(3):
        rows = [r for r in ds if r["source_index"] == question]
        assert [r["gold_position"] for r in rows] == list(range(k))
        assert len({r["example_id"] for r in rows}) == 1
        distractor_orders = set()
        for row in rows:
            lines = [row["prompt"][s:e] for s, e in row["item_spans"]]
            gold_line = lines[row["gold_position"]]
            assert gold_line.endswith(") " + gold_texts[question])
            assert row["doc_titles"][row["gold_position"]] == row["gold_title"]
            others = [line.split(") ", 1)[1] for i, line in enumerate(lines) if i != row["gold_position"]]
            assert gold_texts[question] not in others  # never the question's own passage
            assert len(set(others)) == k - 1  # no duplicates
            distractor_orders.add(tuple(others))
        assert len(distractor_orders) == 1  # same distractors, same order: only the gold document moves


def test_item_spans_slice_document_lines(nq_oracle_path: str) -> None:
    ds = MDQATask(path=nq_oracle_path, num_documents=7, gold_positions="quartiles", num_examples=4).build()
    for row in ds:
        prompt, spans = row["prompt"], row["item_spans"]
        assert len(spans) == row["num_positions"] == 7
        for i, (start, end) in enumerate(spans):
            assert prompt[start:end].startswith(f"Document [{i + 1}](Title: {row['doc_titles'][i]}) ")
            assert prompt[end] == "\n"
            assert prompt[start - 1] == "\n"
        block = prompt.split("\n\n")[1]
        assert block == "\n".join(prompt[s:e] for s, e in spans)
        assert prompt.endswith(f"\n\nQuestion: {row['question']}\nAnswer:")


def test_grids() -> None:
    assert resolve_gold_positions("ends-20-50-80", 20) == [0, 4, 10, 15, 19]  # 3.8, 9.5, 15.2 rounded half-even
    assert resolve_gold_positions("quartiles", 20) == [0, 5, 10, 14, 19]  # 4.75, 9.5, 14.25
    assert resolve_gold_positions("ends-20-50-80", 10) == [0, 2, 4, 7, 9]  # 4.5 -> 4 (half to even)
    assert resolve_gold_positions("Quartiles", 7) == [0, 2, 3, 4, 6]  # 1.5 -> 2, 4.5 -> 4: mirror-symmetric
    assert resolve_gold_positions("ends-20-50-80", 2) == [0, 1]  # duplicates dropped
    assert resolve_gold_positions("all", 4) == [0, 1, 2, 3]
    assert resolve_gold_positions([3, 1, 3], 4) == [1, 3]
    assert resolve_gold_positions(2, 4) == [2]
    for old, new in (("caliope", "ends-20-50-80"), ("LPES", "quartiles")):  # the names of earlier versions
        with pytest.raises(ValueError, match=f"grid '{old}' is now called '{new}'.*--gold_positions {new}"):
            resolve_gold_positions(old, 20)
    with pytest.raises(ValueError, match=r"unknown gold-position grid 'middle'"):
        resolve_gold_positions("middle", 4)
    with pytest.raises(ValueError, match=r"must be a grid name"):
        resolve_gold_positions([1.5], 4)  # type: ignore[list-item]


def test_caliope_rows_per_question(nq_oracle_path: str) -> None:
    ds = MDQATask(path=nq_oracle_path, num_documents=20, num_examples=2).build()
    assert [r["gold_position"] for r in ds] == [0, 4, 10, 15, 19] * 2
    assert ds[0]["id"] == "mdqa-k20-s0-q00000-pos000"
    assert set(ds.column_names) >= {"id", "prompt", "answers", "gold_position", "num_positions", "item_spans", "task"}


def test_determinism_and_seed(nq_oracle_path: str) -> None:
    def build(seed: int, k: int = 10, n: int = 5):
        return MDQATask(path=nq_oracle_path, num_documents=k, gold_positions=[0], num_examples=n, seed=seed).build()

    first, again, other = build(0), build(0), build(1)
    assert first.to_list() == again.to_list()
    assert [r["doc_titles"] for r in first] != [r["doc_titles"] for r in other]
    # a question's context depends only on (seed, question): independent of num_examples, nested in k
    assert build(0, n=2).to_list() == first.to_list()[:2]
    small = build(0, k=5)
    for big_row, small_row in zip(first, small, strict=True):
        assert small_row["doc_titles"] == big_row["doc_titles"][:5]


def test_answer_bearing_distractors_are_skipped(tmp_path: Path) -> None:
    lines = [
        oracle_line("capital of france", "Paris", "France", "Its capital is Paris."),
        oracle_line("q1", "a1", "Paris metro", "The Paris metro opened in 1900."),  # contains "Paris"
        oracle_line("q2", "a2", "Oslo", "Oslo is in Norway."),
        oracle_line("q3", "a3", "Rome", "Rome is in Italy."),
    ]
    path = write_jsonl_gz(tmp_path / "oracle.jsonl.gz", lines)
    for seed in range(5):
        row = MDQATask(path=path, num_documents=3, gold_positions=[0], num_examples=1, seed=seed).build()[0]
        assert sorted(row["doc_titles"][1:]) == ["Oslo", "Rome"]
    with pytest.raises(ValueError, match=r"exclude_answer_distractors=False"):
        MDQATask(path=path, num_documents=4, num_examples=1).build()
    row = MDQATask(path=path, num_documents=4, num_examples=1, exclude_answer_distractors=False).build()[0]
    assert "Paris metro" in row["doc_titles"]


def test_short_answers_exclude_only_whole_words(tmp_path: Path) -> None:
    lines = [
        oracle_line("which letter is the atlantic shaped like", "S", "Atlantic", "An S-shaped basin."),
        oracle_line("q1", "a1", "Snakes", "Snakes hiss, S-curves."),  # "s" inside words only: kept
        oracle_line("q2", "a2", "Letters", "The letter S is a consonant."),  # "s" as a word: skipped
        oracle_line("q3", "a3", "Rome", "Rome is in Italy."),
    ]
    path = write_jsonl_gz(tmp_path / "oracle.jsonl.gz", lines)
    row = MDQATask(path=path, num_documents=3, gold_positions=[2], num_examples=1).build()[0]
    assert sorted(row["doc_titles"][:2]) == ["Rome", "Snakes"]


def test_score_is_best_subspan_em(nq_oracle_path: str) -> None:
    task = MDQATask(path=nq_oracle_path, num_documents=3, num_examples=1)
    answers = task.build()[0]["answers"]
    assert answers == ["Wilhelm Conrad Röntgen"]
    assert task.score("It was wilhelm Conrad Röntgen.", answers) == 1.0
    assert task.score("Marie Curie", answers) == 0.0


def test_bad_inputs(nq_oracle_path: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"num_documents \(k\) must be an int >= 1, got 0"):
        MDQATask(path=nq_oracle_path, num_documents=0)
    with pytest.raises(ValueError, match=r"gold position\(s\) \[10\] outside \[0, 9\]"):
        MDQATask(path=nq_oracle_path, num_documents=10, gold_positions=[0, 10])
    with pytest.raises(ValueError, match=r"needs 99 distractor passages per question.*lower num_documents"):
        MDQATask(path=nq_oracle_path, num_documents=100).build()
    with pytest.raises(FileNotFoundError, match=r"MDQA data file .*missing.jsonl.gz' not found"):
        MDQATask(path=str(tmp_path / "missing.jsonl.gz"))
    with pytest.raises(FileNotFoundError, match=r"MDQA release file .* not found"):
        MDQAReleaseTask(path=str(tmp_path / "missing.jsonl.gz"))
    with pytest.raises(ValueError, match=r"num_examples=41 but .* has only 40 examples"):
        MDQATask(path=nq_oracle_path, num_documents=3, num_examples=41).build()
    with pytest.raises(ValueError, match=r"num_examples must be >= 1"):
        MDQATask(path=nq_oracle_path, num_examples=0)
    bad = write_jsonl_gz(tmp_path / "bad.jsonl.gz", [{"question": "q", "ctxs": []}])
    with pytest.raises(ValueError, match=r"missing field\(s\) \['answers'\]"):
        MDQATask(path=bad, num_documents=1).build()
