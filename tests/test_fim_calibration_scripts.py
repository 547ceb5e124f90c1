"""Amortised FiM's bias file (`python -m evaluation calibrate-fim`) and scripts/compare_fim_calibrations.py: refusals
before the model loads, the output rule (only their own earlier files are replaced), and one tiny comparison end to
end."""

from __future__ import annotations

import json

import pytest
from script_loader import load_script

from evaluation.cli import main as evaluation_main
from evaluation.model_loading import tiny_default

KV = ["--task", "kv", "--task_params", json.dumps({"num_keys": 4})]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    model, tokenizer = tiny_default(seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _refused(capsys, call) -> str:
    """The one stderr line of a refusal (exit code 2, from the parser or from the work)."""
    try:
        code = call()
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def calibrate(argv: list[str]) -> int:
    return evaluation_main(["calibrate-fim", *argv])


@pytest.mark.parametrize("command", [calibrate, lambda argv: load_script("compare_fim_calibrations").main(argv)])
def test_a_parameter_the_task_lacks_is_refused_before_the_model_loads(command, tmp_path, capsys):
    out = tmp_path / ("bias.json" if command is calibrate else "cmp")
    argv = ["--model", str(tmp_path / "no-model"), "--task", "mdqa", "--task_params", '{"max_new_tokens": 24}']
    err = _refused(capsys, lambda: command([*argv, "--out", str(out)]))
    assert "--task_params: unknown parameter(s) ['max_new_tokens'] for task 'mdqa'" in err
    assert not out.exists()


def test_a_users_file_or_folder_is_not_written_over(tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    err = _refused(capsys, lambda: calibrate(["--model", "m", *KV, "--out", str(notes)]))
    assert str(notes) in err and notes.read_text() == '{"mine": true}'
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "report.md").write_text("mine")
    compare = load_script("compare_fim_calibrations")
    err = _refused(capsys, lambda: compare.main(["--model", "m", *KV, "--out", str(folder)]))
    assert "did not write" in err and [p.name for p in folder.iterdir()] == ["report.md"]


def test_a_missing_model_is_one_line_and_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "cmp"
    compare = load_script("compare_fim_calibrations")
    err = _refused(capsys, lambda: compare.main(["--model", str(tmp_path / "nowhere"), *KV, "--out", str(out)]))
    assert "no such directory" in err and not out.exists()


@pytest.mark.slow  # three decoders over a grid of prompts: tens of seconds on a loaded machine
def test_a_tiny_comparison_runs_and_continues_in_its_own_folder(tiny_dir, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = [
        "--model",
        str(tiny_dir),
        *KV,
        "--eval_examples",
        "1",
        "--calibration_examples",
        "1",
        "--gold_positions",
        "[0, 3]",
    ]
    compare = load_script("compare_fim_calibrations")
    assert compare.main([*argv, "--out", str(out)]) == 0
    result = json.loads((out / "comparison.json").read_text())
    assert set(result["methods"]) == {"baseline", "exact", "amortised"} and result["calibration"]["seconds"] > 0
    assert result["prompts"] == len((out / "records.jsonl").read_text().splitlines()) // 3
    # its own folder (a valid bias file in it) is continued: the file is reused, not remade
    assert compare.main([*argv, "--out", str(out)]) == 0
    assert json.loads((out / "comparison.json").read_text())["calibration"] == {"seconds": None, "how": "reused"}
    capsys.readouterr()


@pytest.mark.slow  # the tiny model's bias file on two calibration prompts, then one refused over a user's file
def test_the_bias_file_is_made_and_a_rerun_replaces_only_its_own(tiny_dir, tmp_path, capsys):
    out = tmp_path / "fim-bias.json"
    argv = ["--model", str(tiny_dir), *KV, "--num_examples", "2", "--method", "fim:dummy=blank", "--out", str(out)]
    assert calibrate(argv) == 0 and calibrate(argv) == 0  # its own file is replaced
    assert json.loads(out.read_text())["format"] and f"{out}: 4 items" in capsys.readouterr().out
