"""`python -m workflows benchmark-fit`: `fit`'s own tokens/s, MFU and peak memory, RoPE and REPO alternating.

The GPU numbers are in docs/benchmarks.md; here the command's options,
its report and a whole run of the real command on the tiny model (CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from workflow_commands import parse_args

from workflows.benchmarks import fit as bench
from workflows.cli import main

REPO = Path(__file__).resolve().parents[1]


def _tiny_configs(root: Path) -> tuple[Path, Path]:
    """The shipped tiny REPO config and its RoPE twin (the 1B configs' pair, at the tiny shape)."""
    repo = REPO / "configs" / "train" / "tiny-repo.yaml"
    config = yaml.safe_load(repo.read_text())
    config["model"]["position"] = "rope"
    rope = root / "tiny-rope.yaml"
    rope.write_text(yaml.safe_dump(config))
    return rope, repo


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--micro_batches", "8,4"], "ascending"),
        (["--micro_batches", "4,x"], "--micro_batches"),
        (["--activation_checkpointing", "maybe"], "not true or false"),
        (["--steps", "3", "--warmup", "3"], "leaves no timed step"),
        (["--rope_config", "missing.yaml"], "no such file"),
    ],
)
def test_bad_options_are_one_line_refusals(argv, words, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["benchmark-fit", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert words in error and "\n" not in error and not (tmp_path / "out").exists()


def test_a_users_folder_is_not_written_into(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        main(["benchmark-fit", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "notes.txt" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_ratio_pairs_rope_and_repo_of_one_setting():
    records = [
        {"method": "rope", "activation_checkpointing": False, "micro_batch": 4, "status": "ok", "tokens_per_s": 100.0},
        {"method": "repo", "activation_checkpointing": False, "micro_batch": 4, "status": "ok", "tokens_per_s": 98.0},
        {"method": "rope", "activation_checkpointing": False, "micro_batch": 8, "status": "ok", "tokens_per_s": 110.0},
        {"method": "repo", "activation_checkpointing": False, "micro_batch": 8, "status": "out of memory"},
    ]
    assert bench.ratios(records) == {(False, 4): pytest.approx(100 / 98)}


def test_fit_is_given_the_benchmarks_overrides_after_the_config_and_the_users_last(tmp_path):
    options = parse_args("benchmark-fit", ["--fit_args", "--trainer.accelerator cpu", "--out", str(tmp_path / "o")])
    argv = bench.fit_argv("c.yaml", tmp_path, True, 4, options)
    assert argv[1:6] == ["-m", "repo_train", "fit", "--config", "c.yaml"]
    values = dict(zip(argv[::2], argv[1::2]))
    assert values["--model.init_from"] == "null" and values["--model.activation_checkpointing"] == "true"
    assert values["--data.micro_batch_size"] == "4" and values["--data.global_batch_size"] == "16"
    assert argv[-2:] == ["--trainer.accelerator", "cpu"]


@pytest.mark.slow  # four `python -m repo_train fit` processes on the tiny model (~40 s)
def test_a_cpu_rehearsal_measures_both_methods_and_stops_a_setting_that_fails(tmp_path, capsys):
    rope, repo = _tiny_configs(tmp_path)
    out = tmp_path / "bench"
    common = ["--rope_config", str(rope), "--repo_config", str(repo), "--steps", "3", "--warmup", "1",
              "--accumulation", "1", "--activation_checkpointing", "false"]  # fmt: skip
    assert main(["benchmark-fit", "--out", str(out), "--micro_batches", "2", *common]) == 0
    report = json.loads((out / "report.json").read_text())
    runs = report["runs"]
    assert [(r["method"], r["status"]) for r in runs] == [("rope", "ok"), ("repo", "ok")], runs
    assert all(r["tokens_per_s"] > 0 and r["timed_steps"] == 2 for r in runs)
    assert "| False | 2 |" in (out / "report.md").read_text()  # the REPO/RoPE ratio row
    # a failing micro batch ends its setting: the larger one is not tried
    failing = tmp_path / "failing"
    code = main(
        ["benchmark-fit", "--out", str(failing), "--micro_batches", "1,2", "--fit_args", "--model.lr -1", *common]
    )
    runs = json.loads((failing / "report.json").read_text())["runs"]
    assert code == 1 and [(r["micro_batch"], r["status"]) for r in runs] == [(1, "failed (2)"), (1, "failed (2)")]
    assert "learning rate must be > 0" in runs[0]["last_lines"][-1]  # the report says why
