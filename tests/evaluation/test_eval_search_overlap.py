"""Disjoint search and evaluation examples: `example_offset`, content fingerprints, and the refusal to score a
scale file on the examples its search used (`evaluation.search_overlap`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.cli import main as evaluation_main
from evaluation.search_overlap import FittedExamples, SearchOverlapError, check_disjoint, overlap_lines
from evaluation.tasks import build_task
from evaluation.tasks.base import source_fingerprint
from search.cli import main as search_main

TINY_SEARCH = str(Path(__file__).resolve().parents[2] / "configs" / "search" / "tiny.yaml")

pytestmark = pytest.mark.usefixtures("one_thread")


def _rows(name: str, **params) -> list[dict]:
    return build_task(name, **params).build().to_list()


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("mdqa", {"num_documents": 4, "gold_positions": [0, 3]}),  # the packaged NQ-Open sample
        ("kv", {"num_keys": 5, "gold_positions": "all"}),  # generated from the seed
        ("kv", {"num_keys": 6, "template": "pairs", "key_chars": 1, "distinct_keys": 3, "gold_positions": [0, 5]}),
        ("reversal", {"min_length": 2, "max_length": 3}),
    ],
)
def test_an_offset_build_is_the_tail_of_a_build_from_zero(name, params):
    whole = _rows(name, num_examples=5, **params)
    tail = _rows(name, num_examples=3, example_offset=2, **params)
    ids = {row["example_id"] for row in tail}
    assert tail == [row for row in whole if row["example_id"] in ids]  # same ids, prompts, distractors
    assert len(ids) == 3 * (2 if name == "reversal" else 1)  # reversal: examples per length


def test_an_offset_past_the_data_is_one_clear_error():
    with pytest.raises(ValueError, match=r"has only 40 examples \(5 needed after example_offset=38\)"):
        _rows("mdqa", num_examples=5, example_offset=38, num_documents=3)
    with pytest.raises(ValueError, match="example_offset must be an int >= 0"):
        build_task("kv", num_keys=3, num_examples=1, example_offset=-1)


def test_fingerprints_name_the_example_not_its_position_size_or_seed():
    mdqa = _rows("mdqa", num_examples=3, num_documents=3, gold_positions="all")
    bigger = _rows("mdqa", num_examples=3, num_documents=5, gold_positions=[0], seed=7)
    by_example = {}
    for row in mdqa:
        by_example.setdefault(row["example_id"], set()).add(source_fingerprint(row))
    assert all(len(prints) == 1 for prints in by_example.values())  # one fingerprint per example
    assert len(set().union(*by_example.values())) == 3  # three questions, three fingerprints
    assert {source_fingerprint(r) for r in bigger} == set().union(*by_example.values())  # same questions
    kv = _rows("kv", num_keys=4, num_examples=2, gold_positions="all")
    assert len({source_fingerprint(r) for r in kv}) == 2
    other_seed = _rows("kv", num_keys=4, num_examples=2, gold_positions="all", seed=1)
    assert not {source_fingerprint(r) for r in kv} & {source_fingerprint(r) for r in other_seed}


class Fitted:
    def __init__(self, prints):
        self.prints = prints

    def fitted_examples(self):
        return FittedExamples("s.json", "kv", "fitness 0-1 (seed 0)", frozenset(self.prints))


def test_check_disjoint_refuses_reports_and_allows():
    tasks = [("kv", lambda: {"a", "b", "c"})]
    with pytest.raises(SearchOverlapError, match=r"^lpes: 2 of the 3 kv examples .* fitness 0-1 \(seed 0\) in s\.json"):
        check_disjoint(tasks, [("lpes", [Fitted({"a", "b"})])])
    allowed = check_disjoint(tasks, [("lpes", [Fitted({"a", "b"})])], allow=True)
    assert allowed["lpes"]["kv"] == {
        "checked": True,
        "search": "kv fitness 0-1 (seed 0) (s.json)",
        "shared_examples": 2,
        "examples": 3,
        "allowed": True,
    }
    clean = check_disjoint(tasks, [("lpes", [Fitted({"x"})]), ("baseline", [object()])])
    assert clean["lpes"]["kv"]["shared_examples"] == 0 and "baseline" not in clean
    unread = check_disjoint([("kv", lambda: pytest.fail("no method needs the fingerprints"))], [("pi", [object()])])
    assert unread == {}
    older = Fitted(set())
    older.fitted_examples = lambda: None  # a hand-made or older scale file: nothing to compare with
    unchecked = check_disjoint([("kv", lambda: pytest.fail("not read"))], [("lpes", [older])])
    assert unchecked["lpes"]["kv"]["checked"] is False
    expected = "- lpes: not checked for overlap with its search's examples (its file records no examples: older"
    assert overlap_lines(unchecked, "kv") == [expected + " or hand-made)."]


@pytest.mark.slow  # a search and an evaluation end to end (~7 s)
def test_a_searched_scale_file_is_not_scored_on_its_search_examples(tmp_path, capsys):
    scale = tmp_path / "tiny.json"
    assert search_main(["run", "--config", TINY_SEARCH, "--out", str(scale), "--no_progress"]) == 0
    used = json.loads(scale.read_text())["search"]["examples_used"]
    assert used["task"] == "kv" and len(used["fingerprints"]) == 8  # 4 fitness + 4 held-out examples
    assert used["fitness"] == {"example_offset": 0, "num_examples": 4, "seed": 0}
    assert used["held_out"] == {"example_offset": 4, "num_examples": 4, "seed": 0}
    capsys.readouterr()

    def evaluate(out: str, *extra: str) -> int:
        argv = ["run", "--out", str(tmp_path / out), "--tasks", "kv", "--num_keys", "4", "--num_examples", "4"]
        return evaluation_main([*argv, "--methods", "baseline", "--methods", f"lpes:scale_file={scale}",
                                "--no_progress", *extra])  # fmt: skip

    assert evaluate("on-search", "--example_offset", "2") == 2  # examples 2-5: 2 fitness, 2 held-out
    error = capsys.readouterr().err.strip().splitlines()[-1]  # (after the tiny model's notice)
    assert "error: lpes:scale_file=" in error and "4 of the 4 kv examples of this run were used by its search" in error
    assert "kv fitness 0-3 (seed 0), held-out 4-7 (seed 0)" in error and "--example_offset" in error
    assert not (tmp_path / "on-search" / "records.jsonl").exists()  # refused before any prompt ran

    assert evaluate("after", "--example_offset", "8") == 0
    summary = json.loads((tmp_path / "after" / "summary.json").read_text())
    label = next(label for label in summary["search_overlap"])
    assert summary["search_overlap"][label]["kv"]["shared_examples"] == 0
    assert summary["tasks"]["kv"]["params"]["example_offset"] == 8
    assert json.loads((tmp_path / "after" / "run.json").read_text())["decode"]["dtype"] == "float32"  # CPU: auto
    report = (tmp_path / "after" / "report.md").read_text()
    assert "Source examples 8-11 (4)." in report and "none of these examples (checked)" in report

    assert evaluate("allowed", "--allow_search_overlap") == 0
    report = (tmp_path / "allowed" / "report.md").read_text()
    assert "**4 of these 4 examples were used by its search**" in report and "not a held-out number" in report
