"""On the real SmolLM2-135M-Instruct: the Lost-in-the-Middle lm-eval tasks give, per gold position, the scores
`python -m evaluation run` gives on the same prompts: through lm-eval's own CLI with `--model hf` (baseline) and
through `python -m evaluation lm-eval run --model repo-train` with a method (`pi:scale=1.5`); and `lm-eval report`
turns those two lm-eval runs into the same per-position curve and paired comparison as the project's run.

Small on purpose: 2 questions x 2 positions of 3-document MDQA from the package's sample (8 generations a side).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("lm_eval_installed")]

SIZE = ["--num_documents", "3", "--gold_positions", "0,2", "--num_examples", "2"]
PI = "pi:scale=1.5"


ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], where: Path) -> None:
    """`argv` in `where`, importing this checkout's packages (not another install's)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False, cwd=where, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


def lm_eval_scores(folder: Path) -> dict[int, float]:
    """Per-position best_subspan_em of an lm-eval results file (the tasks are named ..._pos<N>)."""
    (path,) = folder.rglob("results_*.json")
    results = json.loads(path.read_text())["results"]
    return {
        int(name.rsplit("_pos", 1)[1]): value["best_subspan_em,none"]
        for name, value in results.items()
        if "_pos" in name
    }


def project_scores(summary: dict, method: str) -> dict[int, float]:
    by_position = summary["results"]["mdqa"][method]["by_position"]
    return {int(position): entry["accuracy"] for position, entry in by_position.items()}


@pytest.fixture(scope="module")
def runs(real_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("litm_real")
    python = sys.executable
    _run(
        [python, "-m", "evaluation", "lm-eval", "tasks", "--out", str(root / "tasks"), "--families", "mdqa", *SIZE],
        root,
    )
    common = [
        "--include_path",
        str(root / "tasks"),
        "--tasks",
        "litm_mdqa_k3",
        "--device",
        "cpu",
        "--batch_size",
        "1",
        "--apply_chat_template",
        "--log_samples",
    ]
    model = f"pretrained={real_model_dir},dtype=float32"
    lm_eval = str(Path(python).parent / "lm_eval")  # lm-eval's own console script
    _run([lm_eval, "run", *common, "--model", "hf", "--model_args", model, "--output_path", str(root / "hf")], root)
    _run(
        [
            python,
            "-m",
            "evaluation",
            "lm-eval",
            "run",
            *common,
            "--model",
            "repo-train",
            "--model_args",
            f"{model},method={PI}",
            "--output_path",
            str(root / "pi"),
        ],
        root,
    )
    _run(
        [
            python,
            "-m",
            "evaluation",
            "run",
            "--model",
            str(real_model_dir),
            "--tasks",
            "mdqa",
            *SIZE,
            "--methods",
            "baseline",
            "--methods",
            PI,
            "--chat_template",
            "true",
            "--dtype",
            "float32",
            "--device",
            "cpu",
            "--batch_size",
            "1",
            "--no_report",
            "true",
            "--out",
            str(root / "ours"),
        ],
        root,
    )
    _run(
        [
            python,
            "-m",
            "evaluation",
            "lm-eval",
            "report",
            "--out",
            str(root / "report"),
            "--runs",
            f"baseline={root / 'hf'}",
            "--runs",
            f"{PI}={root / 'pi'}",
        ],
        root,
    )
    return root


def test_per_position_scores_equal_the_harness_with_hf_and_with_repo_train_and_a_method(runs):
    ours = json.loads((runs / "ours" / "summary.json").read_text())
    assert lm_eval_scores(runs / "hf") == project_scores(ours, "baseline")
    assert lm_eval_scores(runs / "pi") == project_scores(ours, PI)


def test_the_report_of_lm_evals_samples_equals_the_harness_summary(runs):
    ours = json.loads((runs / "ours" / "summary.json").read_text())
    theirs = json.loads((runs / "report" / "summary.json").read_text())
    for method in ("baseline", PI):
        assert project_scores(theirs, method) == project_scores(ours, method)
    keys = ("mean_diff", "low", "high", "p_value")
    ours_vs, theirs_vs = ours["results"]["mdqa"][PI]["vs_baseline"], theirs["results"]["mdqa"][PI]["vs_baseline"]
    assert {k: theirs_vs[k] for k in keys} == {k: ours_vs[k] for k in keys}
