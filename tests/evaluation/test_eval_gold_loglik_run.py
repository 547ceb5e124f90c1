"""`--score gold_loglik`: a run that teacher-forces each row's gold answer instead of generating."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_eval_runner import config

from evaluation.loglik import pad_token_id, token_continuation_scores
from evaluation.model_loading import tiny_default
from evaluation.report import render_report
from evaluation.results import read_records
from evaluation.run_config import RunConfig
from evaluation.runner import prepare_task, run
from evaluation.sample_data import NQ_OPEN_ORACLE

MULTIPLE_CHOICE = Path(__file__).resolve().parents[1] / "fixtures" / "multiple_choice" / "arc.jsonl"


def test_records_hold_the_gold_answers_mean_log_probability(tmp_path):
    cfg = config(tmp_path, str(NQ_OPEN_ORACLE), score="gold_loglik")
    summary = run(cfg, progress=False)
    records = read_records(tmp_path / "records.jsonl")
    assert len(records) == 2 * (6 + 6) and {r["stop_reason"] for r in records} == {"forced"}
    assert all(r["prediction"] == "" and r["score"] < 0 and r["gold_tokens"] >= 1 for r in records)
    assert summary["tasks"]["mdqa"]["metric"] == summary["tasks"]["kv"]["metric"] == "gold_loglik"
    # independent: one forward over each prepared prompt + " " + first answer, no decode loop, no method
    model, tokenizer = tiny_default(cfg.seed)
    task = cfg.tasks[0]
    prepared = prepare_task("mdqa", {"path": task.path, "num_examples": 2, "num_documents": 3,
                                     "gold_positions": "all"}, model, tokenizer, cfg.settings(task))  # fmt: skip
    gold = [list(tokenizer(" " + row["answers"][0], add_special_tokens=False)["input_ids"]) for row in prepared.rows]
    reference = token_continuation_scores(
        model, [p.input_ids for p in prepared.prompts], gold, pad_token_id(model, tokenizer)
    )
    expected = {row["id"]: total / n for row, (total, n) in zip(prepared.rows, reference)}
    got = {r["id"]: r["score"] for r in records if r["task"] == "mdqa" and r["method"] == "baseline"}
    assert got.keys() == expected.keys()
    assert max(abs(got[k] - expected[k]) for k in got) <= 1e-4 * max(abs(v) for v in expected.values())
    # the PI records differ: the score sees the method
    scaled = {r["id"]: r["score"] for r in records if r["task"] == "mdqa" and r["method"] == "pi:scale=2"}
    assert max(abs(scaled[k] - got[k]) for k in got) > 1e-4
    report = render_report(tmp_path)[-1].read_text()
    assert "gold log-likelihood (nats per token) [95% CI]" in report and "metric `gold_loglik`" in report
    assert (tmp_path / "gold_loglik_by_position_mdqa.png").is_file()  # not named accuracy
    assert not list(tmp_path.glob("accuracy_by_position_*"))
    with pytest.raises(ValueError, match=r"other settings \(differs in tasks.mdqa.metric, tasks.kv.metric"):
        run(config(tmp_path, str(NQ_OPEN_ORACLE)), progress=False)  # the metric's records never mix with these
    accuracy = tmp_path / "accuracy"
    run(config(accuracy, str(NQ_OPEN_ORACLE), methods=["baseline"]), progress=False)
    with pytest.raises(
        ValueError, match=r"task 'mdqa' is scored by gold log-likelihood \(nats per token\) in .* and by accuracy in"
    ):
        render_report(tmp_path, [accuracy])  # one axis, one score


def test_pcd_is_refused_before_anything_is_written(tmp_path):
    """PCD's contrast is a decoding rule, not a distribution: its log-likelihood is not comparable (any setting)."""
    for spec in ("pcd", "pcd:gamma=258", "pcd:beta=0"):
        cfg = config(tmp_path, str(NQ_OPEN_ORACLE), score="gold_loglik", methods=["baseline", spec])
        with pytest.raises(
            ValueError, match="method stack 'pcd:.*' \\(method 1\\): pcd's contrast .* by the task's metric"
        ):
            run(cfg, progress=False)
        assert not (tmp_path / "records.jsonl").exists()


def test_bad_scores_and_option_tasks_are_refused(tmp_path):
    with pytest.raises(ValueError, match="score must be one of"):
        config(tmp_path, str(NQ_OPEN_ORACLE), score="loglik")
    with pytest.raises(ValueError, match=r"\['multiple_choice'\] already score their options by log-likelihood"):
        RunConfig(out=str(tmp_path), tasks={"multiple_choice": {"path": str(MULTIPLE_CHOICE)}}, score="gold_loglik")


def test_a_gold_answer_past_the_trained_positions_is_noted(tmp_path, capsys):
    """Scores are still given (a method may extend the context), but never silently past max_position_embeddings."""
    model, tokenizer = tiny_default(0)
    model.config.max_position_embeddings = 40  # MDQA prompts of 3 short documents run longer than this
    cfg = config(tmp_path, str(NQ_OPEN_ORACLE), score="gold_loglik", methods=["baseline"])
    run(cfg, model=model, tokenizer=tokenizer, progress=False)
    err = capsys.readouterr().err
    assert "gold answer(s) run past the model's max_position_embeddings (40)" in err, err
