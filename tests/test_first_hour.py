"""A researcher's first hour, walked on the CPU as the commands are typed: train a shipped config, Ctrl-C it,
run the same command again (it resumes), export, evaluate the export as it is, run a small LPES search and
run the evaluation command `search show` prints, as printed.

Each step is a subprocess from the repository root, the way the README shows it; a step that fails names
its command and the end of its output.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from interrupt import fit_with_signal

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # about 2-3 minutes of subprocesses on 2 cores


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run(argv: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, check=False, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
    return done


def test_train_interrupt_resume_export_evaluate_search_and_the_printed_command(tmp_path):
    python = sys.executable
    # 1. a shipped training config, Ctrl-C'd past its first checkpoint, then the same command again
    fit = [
        python, "-m", "repo_train", "fit", "--config", str(ROOT / "configs/train/tiny-repo.yaml"),
        "--trainer.max_steps", "30", "--checkpoint.every_n_train_steps", "10",
        "--trainer.default_root_dir", str(tmp_path / "outputs/tiny-repo"),
        "--progress_log.every_n_steps", "1", "--progress_log.every_seconds", "0",
    ]  # fmt: skip
    code, err = fit_with_signal(fit, tmp_path, _env(), signal.SIGINT, after_step=12)
    assert code == 130, err[-3000:]
    assert "to resume, run the same command again" in err.strip().splitlines()[-1]
    resumed = _run(fit, tmp_path)
    assert "resuming the run stopped by SIGINT at step" in resumed.stderr and "not resumable" not in resumed.stderr
    checkpoint = next((tmp_path / "outputs/tiny-repo").rglob("last.ckpt"))

    # 2. export, then evaluate the export as it is (its tokenizer travelled with it)
    _run([python, "-m", "repo_train", "export", "--checkpoint", str(checkpoint), "--out", "hf/tiny"], tmp_path)
    assert (tmp_path / "hf/tiny/tokenizer.json").is_file()
    _run([python, "-m", "evaluation", "run", "--model", "hf/tiny", "--tasks", "kv", "--num_keys", "4",
          "--num_examples", "2", "--methods", "baseline", "--methods", "caliope:calibrator=hourglass", "--out", "results/tiny",
          "--no_progress"], tmp_path)  # fmt: skip
    records = (tmp_path / "results/tiny/records.jsonl").read_text().splitlines()
    assert len(records) == 2 * 2 * 4 and (tmp_path / "results/tiny/report.md").is_file()

    # 3. a small search on the quickstart's base, and the evaluation `search show` prints for it, as printed
    base = ROOT / "workflows/assets/tiny-kv-dip"
    _run([python, "-m", "search", "run", "--model.path", str(base), "--config", str(ROOT / "configs/search/quick.yaml"),
          "--out", "scales/quick.json", "--no_progress"], tmp_path)  # fmt: skip
    shown = _run([python, "-m", "search", "show", "scales/quick.json"], tmp_path).stdout
    printed = [line.split("evaluate", 1)[1].strip() for line in shown.splitlines() if line.startswith("evaluate")]
    assert len(printed) == 1, shown
    argv = shlex.split(printed[0])
    assert argv[:4] == [python, "-m", "evaluation", "run"], printed[0]  # the interpreter that ran `show`
    done = _run([python, *argv[1:]], tmp_path)  # `python` as the user's interpreter
    out = Path(tmp_path, argv[argv.index("--out") + 1])
    summary = json.loads((out / "summary.json").read_text())
    assert {"baseline", "lpes"} <= {label.split(":")[0] for label in summary["methods"]}, done.stdout[-2000:]
