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
    """The tasks, lm-eval's `hf` run, the `repo-train` run with PI, the harness's run of both, and the report of
    the two lm-eval runs (paths hold no spaces: each command is split at them)."""
    root = tmp_path_factory.mktemp("litm_real")
    python, size, model = sys.executable, " ".join(SIZE), f"pretrained={real_model_dir},dtype=float32"
    lm_eval = Path(python).parent / "lm_eval"  # lm-eval's own console script
    common = (
        f"--include_path {root / 'tasks'} --tasks litm_mdqa_k3 --device cpu --batch_size 1 --apply_chat_template "
        "--log_samples"
    )
    for command in (
        f"{python} -m evaluation lm-eval tasks --out {root / 'tasks'} --families mdqa {size}",
        f"{lm_eval} run {common} --model hf --model_args {model} --output_path {root / 'hf'}",
        (
            f"{python} -m evaluation lm-eval run {common} --model repo-train --model_args {model},method={PI} "
            f"--output_path {root / 'pi'}"
        ),
        (
            f"{python} -m evaluation run --model {real_model_dir} --tasks mdqa {size} --methods baseline --methods {PI} "
            f"--chat_template true --dtype float32 --device cpu --batch_size 1 --no_report true --out {root / 'ours'}"
        ),
        (
            f"{python} -m evaluation lm-eval report --out {root / 'report'} --runs baseline={root / 'hf'} "
            f"--runs {PI}={root / 'pi'}"
        ),
    ):
        _run(command.split(), root)
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
