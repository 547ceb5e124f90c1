"""The four command-line entry points answer --help, and the main job's demo runs."""

import subprocess
import sys

import pytest

from repo_train import cli


@pytest.mark.slow  # a fresh interpreter per package (~20 s each on 2 cores)
@pytest.mark.parametrize("package", ["repo_train", "search", "evaluation", "workflows"])
def test_help(package):
    result = subprocess.run(
        [sys.executable, "-m", package, "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert f"python -m {package}" in result.stdout


def test_demo_trains_generates_and_reports_positions(capsys):
    assert cli.main(["demo", "--steps", "25", "--new_tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "olmo2-1b + repo: 1,496,496,128 parameters (1,484,916,736 base + 11,579,392 position predictor" in out
    assert "cached generation equals recomputation: True" in out
    losses = [float(line.split("loss")[1].split()[0]) for line in out.splitlines() if "loss" in line]
    assert losses[-1] < losses[0] - 1.0
    assert "layer 0: [0.00, 1.00, 2.00" in out  # RoPE layer: linear positions
    assert "range per head" in out


def test_unknown_method_is_a_clear_error(capsys):
    assert cli.main(["demo", "--method", "abc"]) == 2
    err = capsys.readouterr().err
    assert "error: unknown position_method 'abc'; choose one of" in err and "Traceback" not in err
