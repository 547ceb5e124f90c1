"""scripts/make_tiny_repo_pair.py: its README from measurements (fast) and a smoke run of the whole script (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
pair = load_script("make_tiny_repo_pair")


def test_readme_states_losses_spans_and_accuracy():
    args = pair.parse_args(["--steps", "20", "--curriculum_steps", "5", "--eval_examples", "2"])
    measured = {
        "losses": {"rope": [0.01, 0.02], "repo": [0.9, 0.7]},
        "tokens": 193,
        "repo_spans": {"1": [3.5, 12.0], "3": [0.4, 40.25]},
        "accuracy": {"base": {"0": 1.0, "63": 0.5}, "rope": {"0": 1.0, "63": 1.0}, "repo": {"0": 0.5, "63": 0.0}},
    }
    text = pair.readme(args, measured)
    assert "for 20 steps with RoPE" in text and "over the first 5 steps" in text
    assert "- repo: 0.900, 0.700" in text and "(RoPE's span: 192)" in text
    assert "| 3 | 0.4 | 40.2 |" in text and "| repo | 0.50 | 0.00 |" in text
    assert "--curriculum_steps 5 --eval_examples 2" in text  # the command that remakes it


@pytest.mark.slow  # trains two tiny models for 3 steps, exports and evaluates three
def test_smoke_run_writes_the_pair_and_leaves_it_alone_after(tmp_path):
    out, work = tmp_path / "pair", tmp_path / "work"
    command = [sys.executable, str(ROOT / "scripts" / "make_tiny_repo_pair.py"), "--out", str(out), "--work",
               str(work), "--steps", "3", "--curriculum_steps", "2", "--eval_examples", "1"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    made = json.loads((out / "pair.json").read_text())
    assert made["steps"] == 3 and made["curriculum_steps"] == 2 and set(made["accuracy"]) == {"base", "rope", "repo"}
    assert len(made["losses"]["repo"]) >= 1 and all(len(heads) == 4 for heads in made["repo_spans"].values())
    for method in ("rope", "repo"):
        config = json.loads((out / method / "config.json").read_text())
        assert config["position_method"] == method and (out / method / "model.safetensors").is_file()
    assert "## Measured" in (out / "README.md").read_text()
    before = (out / "pair.json").read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "exists" in again.stdout and (out / "pair.json").read_bytes() == before
