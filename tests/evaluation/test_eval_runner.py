"""The runner: records and summary, byte-identical resumption, settings guard, summary validation, report."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from evaluation.generation import DecodeSettings
from evaluation.methods import Baseline, Method, MethodStack, PositionInterpolation
from evaluation.report import render_report
from evaluation.results import (
    RECORD_KEYS,
    ResultsFormatError,
    load_summary,
    read_records,
    validate_summary,
    write_json_atomic,
)
from evaluation.runner import RunConfig, RunInterrupted, prepare_task, run, run_stack
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import Task, build_task

METHODS = ["baseline", "pi:scale=2"]


def task_parameters(nq_oracle_path: str) -> dict[str, dict]:
    return {
        "mdqa": dict(path=nq_oracle_path, num_examples=2, num_documents=3, gold_positions="all"),
        "kv": dict(num_keys=3, num_examples=2, gold_positions="all"),
    }


def config(out: Path, nq_oracle_path: str, **overrides) -> RunConfig:
    tasks = task_parameters(nq_oracle_path)
    # MDQA prompts (~2,000 byte tokens) are cut to 508 tokens: fast, and truncation gets recorded
    fields = dict(out=str(out), tasks=tasks, methods=METHODS, max_new_tokens=4, batch_size=4, bootstrap_resamples=200)
    fields.update(max_length=512, truncate="middle")
    fields.update(overrides)
    return RunConfig(**fields)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, nq_oracle_path_module):
    """One uninterrupted run, shared by the tests that compare against it."""
    out = tmp_path_factory.mktemp("reference")
    summary = run(config(out, nq_oracle_path_module), progress=False)
    return out, summary


@pytest.fixture(scope="module")
def nq_oracle_path_module() -> str:
    return str(NQ_OPEN_ORACLE)


def test_run_writes_records_and_summary(reference_run):
    out, summary = reference_run
    records = read_records(out / "records.jsonl")
    assert len(records) == 2 * (2 * 3 + 2 * 3)  # methods × (mdqa rows + kv rows)
    assert all(set(RECORD_KEYS) <= set(r) for r in records)
    assert {(r["task"], r["method"]) for r in records} == {(t, m) for t in ("mdqa", "kv") for m in METHODS}
    assert load_summary(out) == summary
    result = summary["results"]["mdqa"]["pi:scale=2"]
    assert result["n"] == 6 and sorted(result["by_position"]) == ["0", "1", "2"]
    assert result["vs_baseline"]["n"] == 6 and summary["results"]["mdqa"]["baseline"]["vs_baseline"] is None
    assert summary["tasks"]["kv"]["stop_strings"] == ["\n"] and summary["tasks"]["kv"]["max_new_tokens"] == 4
    assert summary["decode"]["truncate"] == "middle"
    assert result["truncated"] == 6 and summary["results"]["kv"]["baseline"]["truncated"] == 0
    assert all(r["truncated"] == (r["task"] == "mdqa") for r in records)
    assert all(r["prompt_tokens"] == 508 for r in records if r["task"] == "mdqa")


def test_interrupted_run_resumes_to_identical_files(tmp_path, reference_run, nq_oracle_path_module):
    reference, _ = reference_run
    cfg = config(tmp_path, nq_oracle_path_module)
    with pytest.raises(RunInterrupted, match="rerun the same command"):
        run(cfg, max_records=5, progress=False)  # stops inside a batch of the first (task, method)
    assert len(read_records(tmp_path / "records.jsonl")) == 5 and not (tmp_path / "summary.json").exists()

    seen = []

    def crash_after_three(record):
        seen.append(record["id"])
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, on_record=crash_after_three, progress=False)
    with open(tmp_path / "records.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"id": "torn')  # a line cut off by a kill
    run(cfg, progress=False)
    for name in ("records.jsonl", "summary.json", "run.json"):
        assert (tmp_path / name).read_bytes() == (reference / name).read_bytes(), name


def test_rerun_of_a_finished_run_changes_nothing(tmp_path, reference_run, nq_oracle_path_module):
    reference, _ = reference_run
    for name in ("records.jsonl", "run.json"):
        shutil.copy(reference / name, tmp_path / name)
    generated = []
    run(config(tmp_path, nq_oracle_path_module), on_record=generated.append, progress=False)
    assert generated == []
    for name in ("records.jsonl", "summary.json", "run.json"):
        assert (tmp_path / name).read_bytes() == (reference / name).read_bytes(), name


def test_other_settings_in_the_same_directory_are_refused(tmp_path, nq_oracle_path_module):
    run(config(tmp_path, nq_oracle_path_module, methods=["baseline"]), progress=False)
    with pytest.raises(ValueError, match=r"other settings \(differs in decode\)"):
        run(config(tmp_path, nq_oracle_path_module, batch_size=2), progress=False)
    # adding a method to an existing directory is fine
    summary = run(config(tmp_path, nq_oracle_path_module, methods=["baseline", "pi:scale=3"]), progress=False)
    assert set(summary["results"]["kv"]) == {"baseline", "pi:scale=3"}


def test_short_forms_are_parsed_once_into_the_objects_the_runner_uses(tmp_path, nq_oracle_path_module):
    cfg = config(tmp_path, nq_oracle_path_module)
    typed = config(
        tmp_path,
        nq_oracle_path_module,
        tasks=[build_task(name, **params) for name, params in task_parameters(nq_oracle_path_module).items()],
        methods=[MethodStack([Baseline()]), MethodStack([PositionInterpolation(scale=2.0)])],
    )
    assert cfg == typed and cfg.labels == METHODS
    assert all(isinstance(task, Task) for task in cfg.tasks) and all(isinstance(s, MethodStack) for s in cfg.methods)
    with pytest.raises(ValueError, match=r"the same task is listed twice: \['kv', 'kv'\]"):
        config(tmp_path, nq_oracle_path_module, tasks=[build_task("kv", num_keys=3, num_examples=1)] * 2)


def test_duplicate_methods_are_refused(tmp_path, nq_oracle_path_module):
    with pytest.raises(ValueError, match="listed twice"):
        run(config(tmp_path, nq_oracle_path_module, methods=["pi:scale=2", "pi:scale=2.0"]), progress=False)


def test_summary_validator_names_the_problem(tmp_path, reference_run):
    _, summary = reference_run
    for broken, message in [
        ({**summary, "format_version": 99}, "format_version 99 is not supported"),
        ({k: v for k, v in summary.items() if k != "format_version"}, "no format_version"),
        ({k: v for k, v in summary.items() if k != "results"}, r"missing key\(s\) \['results'\]"),
    ]:
        path = tmp_path / "summary.json"
        write_json_atomic(path, broken)
        with pytest.raises(ResultsFormatError, match=message):
            load_summary(path)
    result = dict(summary["results"]["kv"]["baseline"])
    del result["rho"]
    with pytest.raises(ResultsFormatError, match=r"results\['kv'\]\['baseline'\] is missing key\(s\) \['rho'\]"):
        validate_summary({**summary, "results": {"kv": {"baseline": result}}})
    with pytest.raises(FileNotFoundError, match="no summary"):
        load_summary(tmp_path / "nowhere")
    assert json.loads((tmp_path / "summary.json").read_text())  # strict JSON (NaN written as null)


def test_report_writes_plots_and_markdown(tmp_path, reference_run):
    reference, _ = reference_run
    paths = render_report(reference, compare=[reference])
    names = sorted(p.name for p in paths)
    assert names == ["accuracy_by_position_kv.png", "accuracy_by_position_mdqa.png", "report.md"]
    assert all(p.stat().st_size > 0 for p in paths)
    text = (reference / "report.md").read_text()
    assert "](accuracy_by_position_mdqa.png)" in text and "| pi:scale=2 |" not in text  # compared: labelled by model
    render_report(reference)
    assert "| pi (scale=2) | 2 (6) |" in (reference / "report.md").read_text()  # short label, questions (prompts)


def test_compared_runs_of_one_model_get_distinct_labels():
    from evaluation.report import run_labels

    one, other = {"model": {"name": "models/rope"}}, {"model": {"name": "models/repo"}}
    dirs = [Path("eval/seed0"), Path("eval/seed1"), Path("eval/repo")]
    assert run_labels(dirs, [one, one, other]) == ["rope [seed0]", "rope [seed1]", "models/repo"]
    assert run_labels([Path("a/x"), Path("b/x")], [one, one]) == ["rope [run 1]", "rope [run 2]"]
    assert run_labels([Path("a/x")], [{"model": {}}]) == ["a/x"]


@dataclass
class SeeBatch(Method):
    """Test method: keeps every batch it is shown."""

    name: ClassVar[str] = "test_see_batch"
    batches: list = field(default_factory=list, init=False)

    def prefill_position_ids(self, batch):
        self.batches.append(batch)


def test_methods_see_document_token_spans_and_no_answers(tiny_lm, nq_oracle_path_module):
    model, tokenizer = tiny_lm
    params = dict(path=nq_oracle_path_module, num_examples=1, num_documents=3, gold_positions=[0, 2])
    prepared = prepare_task("mdqa", params, model, tokenizer, DecodeSettings(max_new_tokens=1, batch_size=2))
    seer = SeeBatch()
    records = list(run_stack(model, tokenizer, prepared, MethodStack([seer])))
    assert [r["method"] for r in records] == ["test_see_batch"] * 2
    (batch,) = seer.batches
    dataset = build_task("mdqa", **params).build()
    prompts = {row["id"]: row for row in dataset}
    for index, meta in enumerate(batch.rows):
        assert set(meta) == {"id", "example_id", "num_positions"}
        row = prompts[meta["id"]]
        documents = [tokenizer.decode(batch.input_ids[index, s:e]) for s, e in batch.item_token_spans[index]]
        assert documents == [row["prompt"][s:e] for s, e in row["item_spans"]]
        assert f"(Title: {row['gold_title']})" in documents[row["gold_position"]]


def test_length_measuring_tasks_get_the_models_tokenizer():
    """RULER needs no tokenizer parameter in the harness: the evaluated model's own is used."""
    from evaluation.model_loading import tiny_default

    model, tokenizer = tiny_default()
    settings = DecodeSettings(max_new_tokens=4, stop_strings=("\n",))
    prepared = prepare_task("ruler_niah_single", {"num_examples": 1, "target_length": 600}, model, tokenizer, settings)
    lengths = [len(p.input_ids) for p in prepared.prompts]
    assert lengths and all(500 <= n <= 610 for n in lengths), lengths


def test_refused_task_leaves_no_settings_behind(tmp_path, nq_oracle_path):
    """A run refused while preparing (prompts too long) writes no run.json, so a corrected rerun is not blocked."""
    too_short = config(tmp_path, nq_oracle_path, truncate=None, methods=["baseline"])
    with pytest.raises(ValueError, match="exceed the 508-token prompt limit"):
        run(too_short, progress=False)
    assert not (tmp_path / "run.json").exists()
    fixed = config(tmp_path, nq_oracle_path, methods=["baseline"], tasks={"kv": task_parameters(nq_oracle_path)["kv"]})
    run(fixed, progress=False)
    assert (tmp_path / "run.json").is_file()
