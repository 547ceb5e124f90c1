"""`python -m evaluation`: help, a run on the built-in tiny default, report, resumption and usage errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evaluation.cli import main

FAST = ["--max_length", "400", "--truncate", "middle", "--no_progress"]


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--model", "--tasks", "--methods", "--data_dir", "--truncate", "--gold_positions", "--max_records"):
        assert option in out
    assert "nq-open-oracle.first40.jsonl.gz" in out  # the fixture fallback is documented


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--methods.help", "pcd"], ["PositionalContrastiveDecoding", "--methods.beta", "default: 2.5"]),
        (["--methods.help=ms_poe"], ["MsPoE", "--methods.outlier_factor"]),
        (["--tasks.help", "kv"], ["KVRetrievalTask", "--tasks.num_keys"]),
        (["--methods.help", "evaluation.methods.pi.PositionInterpolation"], ["--methods.scale"]),
    ],
)
def test_help_of_one_method_or_task_by_its_name(argv, shown, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", *argv])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(text in out for text in shown), out


def test_help_of_an_unknown_name_is_one_line(capsys):
    assert main(["run", "--methods.help", "pdc"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown method 'pdc'; registered methods are [" in err


def test_tiny_default_run_writes_everything_and_report_rerenders(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--tasks", "mdqa,kv", "--methods", "baseline", "--methods", "pi:scale=2", "--out", str(out), *FAST]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "mdqa         pi:scale=2" in captured.out and "built-in tiny random model" in captured.err
    names = {p.name for p in out.iterdir()}
    assert {"records.jsonl", "summary.json", "run.json", "report.md"} <= names
    assert {"accuracy_by_position_mdqa.png", "accuracy_by_position_kv.png"} <= names
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"]["mdqa"]["params"]["num_documents"] == 3 and summary["model"]["path"] is None
    (out / "report.md").unlink()
    assert main(["report", "--out", str(out)]) == 0
    assert (out / "report.md").is_file()


def test_max_records_stops_with_exit_3_and_a_rerun_finishes(tmp_path, capsys):
    argv = ["run", "--tasks", "kv", "--out", str(tmp_path), "--max_new_tokens", "2", "--no_report", *FAST]
    assert main([*argv, "--max_records", "3"]) == 3
    assert "rerun the same command to resume" in capsys.readouterr().err
    assert main(argv) == 0
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 8  # 2 examples × 4 positions


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/no/such/dir"], "no such directory; pass a local HF model directory"),
        (["--tasks", "mdqa,nosuch"], "unknown task(s) ['nosuch']"),
        (["--methods", "nosuch"], "unknown method 'nosuch'"),
        (["--methods", "pi:scale"], "write key=value"),
        (["--methods", "pi:scale=2,size=3"], "valid parameters are ['scale']"),
        (["--task_param", "mdqa:num_documents"], "bad --task_param"),
        (["--task_param", "mdqa:bogus=1"], "unknown parameter(s) ['bogus'] for task 'mdqa'"),
        (["--data_dir", "/no/such/dir"], "is not a directory; download qa_data/nq-open-oracle.jsonl.gz"),
        (["--tasks", "kv", "--num_keys", "50", "--max_length", "300"], "--truncate middle|left"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["run", "--out", str(tmp_path / "out"), "--no_progress", *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("python -m evaluation")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_report_without_a_run_is_a_usage_error(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path)]) == 2
    assert "no summary" in capsys.readouterr().err


@pytest.mark.slow  # a fresh interpreter running the CLI
def test_module_entry_point_exit_code_in_a_subprocess(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "evaluation", "run", "--out", str(tmp_path), "--methods", "pi:scale=x"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m evaluation run: error: method 'pi': scale must be float, got 'x'"
    ]
