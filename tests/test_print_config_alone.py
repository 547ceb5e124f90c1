"""One pattern for every command (issue 23): `--print_config` with no other option exits 0 and prints YAML.

Options the command requires (`--out`, a scale file, ...) print as null: the text is a template, and
`--config` of it plus those keys runs the command (end to end below for `evaluation run` and `search run`).
Each command runs in a fresh interpreter, as a user types it. The commands whose `--print_config` loads
torch (their parser or their resolution needs the model classes) take seconds each and are marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaluation.cli import main as evaluation_main
from search.cli import main as search_main

ROOT = Path(__file__).resolve().parents[1]
#: Every script that takes options (its parser is a `config_cli.ConfigParser`), and scripts/check_gpu.py.
SCRIPTS = sorted(
    f"scripts/{path.name}"
    for path in (ROOT / "scripts").glob("*.py")
    if "ConfigParser" in path.read_text(encoding="utf-8") or path.name == "check_gpu.py"
)
#: Commands whose `--print_config` loads no ML package (tests/test_startup.py checks their `--help` that way):
#: every script parses before importing torch (2026-11-26).
FAST = [
    "python -m repo_train demo",
    "python -m repo_train export",
    "python -m repo_train real-model",
    "python -m workflows check-gpu",
    "python -m workflows benchmark-calibrators",
    "python -m workflows benchmark-search",
    "python -m workflows benchmark-harness",
    "python -m workflows benchmark-fim",
    "python -m workflows benchmark-fit",
    "python -m workflows benchmark-repo-overhead",
    "python -m workflows benchmark-training",
    "python -m workflows benchmark-startup",
    "python -m workflows device-kit",
    "python -m workflows study-real-model",
    "python -m workflows crosscheck-lm-eval",
    "python -m workflows reproduce-reversal",
    "python -m workflows quickstart",
    "python -m workflows reproduce-position-bias",
    "python -m evaluation run",
    "python -m evaluation report",
    "python -m evaluation summarize",
    "python -m evaluation calibrate-fim",
    "python -m search run",
    "python -m search show",
    "python -m search diagnose",
    *SCRIPTS,
]
#: LightningCLI's: its parser is built from the model classes (torch and Lightning load first).
HEAVY = ["python -m repo_train fit", "python -m repo_train validate"]


def print_config(command: str) -> dict:
    """`command --print_config` in a fresh interpreter: exit code 0, the printed YAML as a mapping."""
    words = command.split()
    argv = [sys.executable, *words[1:]] if words[0] == "python" else [sys.executable, str(ROOT / words[0])]
    result = subprocess.run(
        [*argv, "--print_config"], capture_output=True, text=True, timeout=600, check=False, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert isinstance(printed, dict) and printed, result.stdout
    return printed


def test_every_script_with_options_is_listed():
    assert set(FAST) - set(SCRIPTS) == {c for c in FAST if c.startswith("python")}  # no stale script name
    assert len(SCRIPTS) >= 4 and "scripts/make_tiny_dip_base.py" in SCRIPTS


@pytest.mark.parametrize("command", FAST)
def test_print_config_alone_prints_yaml(command):
    print_config(command)


@pytest.mark.slow  # each loads torch (and Lightning for fit / validate): ~10-40 s apiece on two loaded cores
@pytest.mark.parametrize("command", HEAVY)
def test_print_config_alone_prints_yaml_heavy(command):
    print_config(command)


def test_required_options_print_as_null_to_fill_in(capsys):
    assert evaluation_main(["report", "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"out": None, "compare": [], "seeds": False}
    assert search_main(["show", "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"scale_file": None, "num_layers": None}


def test_print_config_runs_nothing_in_a_command_that_resolves_nothing(tmp_path, capsys):
    """`report`, `summarize`, `diagnose`, ... print their options; before, the flag was ignored and they ran."""
    assert evaluation_main(["summarize", "--out", str(tmp_path / "none"), "--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["out"] == str(tmp_path / "none")
    assert not (tmp_path / "none").exists()


@pytest.mark.slow  # a tiny-model evaluation end to end: ~40 s on two loaded cores (imports included)
def test_evaluation_run_template_plus_out_runs(tmp_path, capsys):
    assert evaluation_main(["run", "--print_config"]) == 0
    template = tmp_path / "run.yaml"
    template.write_text(capsys.readouterr().out)
    assert yaml.safe_load(template.read_text())["out"] is None
    out = tmp_path / "result"
    assert evaluation_main(["run", "--config", str(template), "--out", str(out), "--no_report", "--no_progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["results"]) == ["mdqa"] and list(summary["results"]["mdqa"]) == ["baseline"]
    stored = yaml.safe_load((out / "config.yaml").read_text())
    assert stored == {**yaml.safe_load(template.read_text()), "out": str(out), "no_report": True, "no_progress": True}


@pytest.mark.slow  # the tiny search of configs/search/tiny.yaml end to end: ~30 s on two loaded cores
def test_search_run_template_plus_out_runs(tmp_path, capsys):
    assert search_main(["run", "--print_config"]) == 0
    template = tmp_path / "search.yaml"
    template.write_text(capsys.readouterr().out)
    assert yaml.safe_load(template.read_text())["out"] is None
    out = tmp_path / "scales" / "tiny.json"
    assert search_main(["run", "--config", str(template), "--out", str(out), "--no_progress"]) == 0
    assert json.loads(out.read_text())["format_version"] >= 1
    stored = yaml.safe_load(out.with_name("tiny.config.yaml").read_text())
    assert stored == {**yaml.safe_load(template.read_text()), "out": str(out), "no_progress": True}
