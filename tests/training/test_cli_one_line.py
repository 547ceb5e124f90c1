"""The real `python -m repo_train fit` process prints a user error as exactly one stderr line.

The table in tests/test_bad_inputs_training.py runs `main(argv)` in-process; this checks
what only a real process shows: LightningCLI's warning about `args` and
sys.argv together (printed on every run before) and its ~90-line usage dump
are gone, and `--help` still prints the options.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _fit(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "repo_train", "fit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


@pytest.mark.slow  # the CLI in subprocesses
def test_a_parse_error_is_one_line_and_help_still_works(tmp_path):
    result = _fit("--model.no_such_key", "1", cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        (
            "python -m repo_train fit: error: unrecognized arguments: --model.no_such_key 1 "
            "(python -m repo_train fit --help lists the options)"
        )
    ]
    result = _fit("--help", cwd=tmp_path)
    assert result.returncode == 0 and "--allow_hparam_changes" in result.stdout and "--model.lr" in result.stdout
    assert list(tmp_path.iterdir()) == []
