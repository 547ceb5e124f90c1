"""`mdqa_release` from the release's qa_data folder: every `nq-open-{k}_total_documents_gold_at_{i}` file is one gold
position of the same questions (paired by question), found through `--data_dir` as `evaluation run` resolves it,
and written as lm-eval tasks by `python -m evaluation lm-eval tasks --families mdqa_release`."""

from __future__ import annotations

import gzip
import json

import pytest

from evaluation.cli import main as evaluation_main
from evaluation.run_config import with_data_file
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks.base import read_jsonl
from evaluation.tasks.mdqa import MDQAReleaseTask


@pytest.fixture
def qa_data(tmp_path):
    """Release-layout files for k=3 (gold at 0 and 2) made from the package's sample (no new data)."""
    records = list(read_jsonl(str(NQ_OPEN_ORACLE)))[:6]
    folder = tmp_path / "qa_data" / "3_total_documents"
    folder.mkdir(parents=True)
    for gold_at in (0, 2):
        lines = []
        for index, record in enumerate(records[:4]):
            others = [dict(records[(index + j) % 6]["ctxs"][0], isgold=False) for j in (1, 2)]
            ctxs = [*others[:gold_at], dict(record["ctxs"][0], isgold=True), *others[gold_at:]]
            lines.append(json.dumps({"question": record["question"], "answers": record["answers"], "ctxs": ctxs}))
        with gzip.open(folder / f"nq-open-3_total_documents_gold_at_{gold_at}.jsonl.gz", "wt") as handle:
            handle.write("\n".join(lines) + "\n")
    return tmp_path / "qa_data"


def test_a_folder_gives_every_position_of_the_same_questions(qa_data):
    params = with_data_file("mdqa_release", {"num_documents": 3, "num_examples": 2}, qa_data)
    task = MDQAReleaseTask(**params)
    rows = list(task.rows())
    assert [(r["example_id"], r["gold_position"]) for r in rows] == [
        ("mdqa-release-k3-q00000", 0),
        ("mdqa-release-k3-q00001", 0),
        ("mdqa-release-k3-q00000", 2),
        ("mdqa-release-k3-q00001", 2),
    ]
    assert rows[0]["question"] == rows[2]["question"] and rows[0]["prompt"] != rows[2]["prompt"]
    assert [r["gold_position"] for r in MDQAReleaseTask(path=str(qa_data), num_documents=3, positions=[2]).rows()] == [
        2,
        2,
        2,
        2,
    ]


def test_a_missing_position_or_k_is_one_line(qa_data):
    with pytest.raises(FileNotFoundError, match=r"gold_at_1\.jsonl\(\.gz\) \(gold positions with a file: \[0, 2\]\)"):
        MDQAReleaseTask(path=str(qa_data), num_documents=3, positions=[1])
    with pytest.raises(FileNotFoundError, match="no nq-open-20_total_documents_gold_at_"):
        with_data_file("mdqa_release", {}, qa_data)


def test_lm_eval_tasks_writes_a_task_per_release_file(qa_data, tmp_path):
    out = tmp_path / "tasks"
    argv = ["lm-eval", "tasks", "--out", str(out), "--data_dir", str(qa_data), "--families", "mdqa_release"]
    assert evaluation_main([*argv, "--num_documents", "3"]) == 0
    assert sorted(p.name for p in out.glob("litm_mdqa_release*.yaml")) == [
        "litm_mdqa_release_k3.yaml",
        "litm_mdqa_release_k3_pos0.yaml",
        "litm_mdqa_release_k3_pos2.yaml",
    ]
    rows = (out / "data" / "litm_mdqa_release_k3_pos2.jsonl").read_text().splitlines()
    assert len(rows) == 4 and json.loads(rows[0])["family"] == "mdqa_release"
