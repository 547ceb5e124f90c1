"""The main command end to end, at the smallest settings: every step runs and the report is written."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_the_whole_loop(tmp_path):
    out = tmp_path / "qs"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--out", str(out), "--steps", "4",
         "--train-examples", "64", "--eval-examples", "1", "--generations", "0"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    report = (out / "README.md").read_text()
    for piece in ("eval/rope/report.md", "eval/repo/report.md", "scales/rope-kv.json", "commands.sh"):
        assert piece in report
    assert "| rope | `baseline` |" in report and "| repo | `baseline` |" in report and "| base | `baseline` |" in report
    assert (out / "repo_positions_last_layer.png").is_file()
    assert (out / "eval" / "rope" / "accuracy_by_position_kv.png").is_file()
    summary = json.loads((out / "eval" / "rope" / "summary.json").read_text())
    methods = set(summary["results"]["kv"])
    assert {"baseline", "pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30"} <= methods
    assert any(m.startswith("lpes:") for m in methods) and any(m.startswith("caliope:") for m in methods)
    assert any(m.startswith("fim:") for m in methods)
    assert (out / "models" / "repo" / "tokenizer.json").is_file()
    commands = (out / "commands.sh").read_text()
    assert "python -m repo_train fit" in commands and "python -m search run" in commands
    config = (out / "configs" / "train-repo.yaml").read_text()
    assert "init_from:" in config and "tiny-kv-base" in config and "prompt_completion" in config


def test_quickstart_refuses_a_missing_base(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "quickstart.py"), "--out", str(tmp_path / "qs"), "--base",
         str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "is not an HF model directory" in result.stderr
