"""The task registry: names, parameter checks and the shared row schema."""

from __future__ import annotations

import pytest

from evaluation.tasks import TASKS, KVRetrievalTask, MDQATask, build_task

CORE = {"id", "example_id", "task", "prompt", "answers", "gold_position", "num_positions", "item_spans"}


def test_registry_names() -> None:
    assert TASKS["mdqa"] is MDQATask and TASKS["kv"] is KVRetrievalTask
    ruler = {f"ruler_niah_{v}" for v in ("single", "multikey", "multivalue", "multiquery")} | {"ruler_vt"}
    others = {"babi_qa2", "reversal", "longbench", "scrolls", "multiple_choice"}
    assert set(TASKS) == {"mdqa", "mdqa_release", "kv"} | ruler | others


def test_build_task_returns_configured_task(nq_oracle_path: str, kv_path: str) -> None:
    mdqa = build_task("mdqa", path=nq_oracle_path, num_documents=5, num_examples=2)
    kv = build_task("kv", path=kv_path, num_examples=1, gold_positions=[0, 74])
    generated = build_task("kv", num_keys=4, num_examples=1)
    for task, rows in ((mdqa, 2 * 5), (kv, 2), (generated, 4)):
        ds = task.build()
        assert len(ds) == rows
        assert CORE <= set(ds.column_names)
        assert all(len(r["item_spans"]) == r["num_positions"] for r in ds)
        assert len(set(ds["id"])) == len(ds)  # ids unique within a build


def test_build_task_errors(nq_oracle_path: str) -> None:
    with pytest.raises(ValueError, match=r"unknown task 'qa'; registered tasks are \['babi_qa2', 'kv', 'longbench', "):
        build_task("qa")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['k'\] for task 'mdqa'; valid parameters are"):
        build_task("mdqa", path=nq_oracle_path, k=10)
    with pytest.raises(ValueError, match=r"task 'mdqa_release' needs parameter\(s\) \['path'\]"):
        build_task("mdqa_release")
