"""`python -m workflows reproduce-reversal`: aggregation over seeds (made-up summaries), the command runner, a smoke
run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_commands import parse_args as parse_command_args

from workflows.commands import CommandRunner
from workflows.reversal.report import FORMAT_VERSION, write_results
from workflows.reversal.results import aggregate, failure_modes, per_length_accuracy

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str]):
    return parse_command_args("reproduce-reversal", argv)


def _summary(accuracies: dict[int, float], min_length: int = 2) -> dict:
    """The part of a harness summary.json the script reads: by_position keyed by str(length - min_length)."""
    by_position = {
        str(n - min_length): {"accuracy": a, "low": 0.0, "high": 1.0, "n": 10} for n, a in accuracies.items()
    }
    return {"results": {"reversal": {"baseline": {"by_position": by_position}}}}


def test_per_length_accuracy_maps_positions_back_to_lengths():
    curve = per_length_accuracy(_summary({2: 1.0, 3: 0.5, 4: 0.25}), min_length=2)
    assert curve == {2: 1.0, 3: 0.5, 4: 0.25}
    assert per_length_accuracy(_summary({5: 0.1}, min_length=5), min_length=5) == {5: 0.1}


def test_aggregate_mean_std_and_ranges():
    # train_max = 3: lengths 2-3 in distribution, 4-5 extrapolation
    per_seed = {
        "rope": {
            0: {2: 1.0, 3: 1.0, 4: 0.5, 5: 0.0},
            1: {2: 1.0, 3: 0.8, 4: 0.3, 5: 0.2},
            2: {2: 1.0, 3: 0.9, 4: 0.1, 5: 0.1},
        },
        "repo": {0: {2: 1.0, 3: 1.0, 4: 1.0, 5: 0.6}},
    }
    result = aggregate(per_seed, train_max=3)
    rope = result["rope"]
    assert rope["seeds"] == [0, 1, 2]
    assert rope["per_length"][3]["mean"] == pytest.approx(0.9)
    assert rope["per_length"][3]["std"] == pytest.approx(0.1)  # sample std of 1.0, 0.8, 0.9
    assert rope["per_length"][4]["by_seed"] == [0.5, 0.3, 0.1]
    assert rope["per_length"][4]["std"] == pytest.approx(0.2)
    assert rope["per_length"][2] == {"mean": 1.0, "std": 0.0, "by_seed": [1.0, 1.0, 1.0]}
    # per-seed range means: in = 1.0, 0.9, 0.95; out = 0.25, 0.25, 0.1
    assert rope["in_distribution"]["mean"] == pytest.approx(0.95)
    assert rope["in_distribution"]["std"] == pytest.approx(0.05)
    assert rope["in_distribution"]["lengths"] == [2, 3]
    assert rope["extrapolation"]["mean"] == pytest.approx(0.2)
    assert rope["extrapolation"]["std"] == pytest.approx(math.sqrt(((0.05**2) * 2 + 0.1**2) / 2))
    assert rope["extrapolation"]["lengths"] == [4, 5]
    repo = result["repo"]
    assert repo["extrapolation"] == {"mean": pytest.approx(0.8), "std": 0.0, "lengths": [4, 5]}  # one seed: std 0
    # nothing tested past train_max: no extrapolation number
    assert aggregate({"nope": {0: {2: 1.0, 3: 0.0}}}, train_max=3)["nope"]["extrapolation"] is None


def test_aggregate_refuses_mismatched_lengths_and_empty_methods():
    with pytest.raises(ValueError, match="covers lengths"):
        aggregate({"rope": {0: {2: 1.0, 3: 1.0}, 1: {2: 1.0}}}, train_max=3)
    with pytest.raises(ValueError, match="no seeds"):
        aggregate({"rope": {}}, train_max=3)


def test_results_markdown_has_the_table(tmp_path):
    per_seed = {"rope": {0: {n: 1.0 for n in range(2, 31)}, 1: {n: 0.5 for n in range(2, 31)}}}
    args = parse_args(["--seeds", "2", "--methods", "rope", "--out", str(tmp_path)])
    failures = {"rope": {"n": 20, "mean_predicted_words": 20.0, "mean_gold_words": 25.5, "stops_at_train_max": 1.0,
                         "correct_prefix": 0.8, "correct_suffix": 0.0}}  # fmt: skip
    results = write_results(tmp_path, args, per_seed, runs={}, failures=failures)
    text = (tmp_path / "results.md").read_text()
    assert "| rope | 20 | 20.0 (25.5) | 1.00 | 0.80 | 0.00 |" in text
    assert "| method | seed 0 | seed 1 |" in text and "| rope | 1.000 / 1.000 | 0.500 / 0.500 |" in text
    assert "| method | in distribution | extrapolation | L=2 | L=5 | L=10 | L=15 | L=20 | L=22 | L=25 | L=30 |" in text
    assert "| rope | 0.750 ± 0.354 | 0.750 ± 0.354 |" in text
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["format_version"] == FORMAT_VERSION and saved["settings"]["train_max"] == 20
    assert saved["methods"]["rope"]["per_length"]["30"]["mean"] == results["methods"]["rope"]["per_length"][30]["mean"]
    assert (tmp_path / "reversal.png").stat().st_size > 0
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob(".*.png"))


def test_parse_args_errors():
    with pytest.raises(SystemExit):
        parse_args(["--methods", "alibi"])
    with pytest.raises(SystemExit):
        parse_args(["--train_lengths", "20-2"])
    args = parse_args(["--methods", "rope, repo", "--test_lengths", "3-9"])
    assert args.methods == ["rope", "repo"] and (args.test_min, args.test_max) == (3, 9)


def test_command_runner_logs_appends_and_reports_failure(tmp_path, capsys):
    run = CommandRunner(tmp_path, description="test commands")
    seconds = run("say hi", "json.tool", "--help", log=tmp_path / "logs" / "hi.log", echo=False)
    assert seconds >= 0 and run.timings[0][0] == "say hi"
    assert "usage" in (tmp_path / "logs" / "hi.log").read_text()
    with pytest.raises(subprocess.CalledProcessError):
        run("fail", "json.tool", "/no/such/file", log=tmp_path / "logs" / "fail.log", echo=False)
    assert "fail failed" in capsys.readouterr().out
    again = CommandRunner(tmp_path, fresh=False)  # a resumed run keeps the earlier commands
    again("again", "json.tool", "--help", log=tmp_path / "logs" / "again.log", echo=False)
    script = (tmp_path / "commands.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash\n# test commands\n")
    assert script.count("python -m json.tool") == 3 and "# again" in script
    CommandRunner(tmp_path)  # fresh: starts over
    assert "json.tool" not in (tmp_path / "commands.sh").read_text()


@pytest.mark.slow  # the whole command in a subprocess: trains, exports, evaluates, reruns
def test_smoke_run_trains_exports_evaluates_and_resumes(tmp_path):
    """The whole command at the smallest settings: 1 seed, 1 method, 3 steps, lengths 2-3 (train) / 2-4 (test)."""
    out = tmp_path / "rev"
    command = [sys.executable, "-m", "workflows", "reproduce-reversal", "--out", str(out), "--seeds", "1", "--methods", "repo", "--steps", "3",
               "--hidden", "32", "--batch_size", "4", "--train_examples", "16", "--examples_per_length", "1",
               "--train_lengths", "2-3", "--test_lengths", "2-4"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[1/1] repo-seed0: train" in result.stdout
    saved = json.loads((out / "results.json").read_text())
    assert sorted(saved["methods"]["repo"]["per_length"]) == ["2", "3", "4"]
    assert saved["methods"]["repo"]["extrapolation"]["lengths"] == [4, 4]
    assert (out / "reversal.png").is_file() and "| repo |" in (out / "results.md").read_text()
    assert (out / "models" / "repo-seed0" / "tokenizer.json").is_file()
    config = (out / "configs" / "train-repo-seed0.yaml").read_text()
    assert "repo_train.data.PromptCompletionData" in config and "num_hidden_layers: 4" in config
    commands = (out / "commands.sh").read_text()
    assert "python -m repo_train fit" in commands and "python -m evaluation run" in commands
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert rerun.returncode == 0 and "evaluation exists, skipped" in rerun.stdout, rerun.stderr[-3000:]


def test_failure_modes_beyond_training_lengths():
    def record(length, prediction, answer):
        return {"gold_position": length - 2, "prediction": prediction, "answers": [answer]}

    records = [
        record(3, "c b a", "c b a"),  # in distribution: ignored
        record(4, "d c b", "d c b a"),  # stopped one short: 3/4 correct prefix
        record(5, "e d x b a", "e d c b a"),  # wrong third word: 2/5
    ]
    stats = failure_modes(records, min_length=2, train_max=3)
    assert stats["n"] == 2
    assert stats["mean_predicted_words"] == pytest.approx(4.0) and stats["mean_gold_words"] == pytest.approx(4.5)
    assert stats["stops_at_train_max"] == pytest.approx(0.5)
    assert stats["correct_prefix"] == pytest.approx((3 / 4 + 2 / 5) / 2)
    assert stats["correct_suffix"] == pytest.approx((0 / 4 + 2 / 5) / 2)  # "d c b" vs "d c b a": last words differ
    assert failure_modes(records[:1], min_length=2, train_max=3) is None
