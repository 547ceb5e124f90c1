"""scripts/make_tiny_dip_base.py and workflows/tiny_dip.py: the shared recipe, middle and edges with intervals, the
README, a smoke run."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

from evaluation.results import build_summary, summarize_group
from workflows import position_bias, tiny_dip

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_tiny_dip_base.py"
ASSET_FILES = {"README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json"}  # fmt: skip

dip = load_script("make_tiny_dip_base")


def _records(method: str, accuracy_by_position: dict[int, float], questions: int = 40, seed: int = 0) -> list[dict]:
    """kv records of `questions` questions at each position, each right with that position's probability."""
    rng = random.Random(seed)
    records = []
    for q in range(questions):
        for position, accuracy in accuracy_by_position.items():
            score = float(rng.random() < accuracy)
            records.append({"id": f"q{q}-p{position}", "example_id": f"q{q}", "task": "kv", "method": method,
                            "gold_position": position, "num_positions": 64, "score": score})  # fmt: skip
    return records


def test_recipe_is_the_reproductions_with_our_settings():
    args = dip.parse_args(["--steps", "7", "--eval_examples", "3", "--seed", "2"])
    settings = dip.recipe_settings(args)
    assert (settings.pairs, settings.distinct_keys, settings.edge_width, settings.edge_share) == (64, 8, 4, 1.0)
    assert (settings.steps, settings.eval_examples, settings.threads) == (7, 3, 1)
    assert position_bias.eval_positions(settings) == [0, 9, 18, 27, 36, 45, 54, 63]


def test_parse_args_errors(capsys):
    for argv, message in (
        (["--steps", "0"], "--steps must be >= 1"),
        (["--eval_examples", "0"], "--eval_examples must be >= 1"),
        (["--seed", "-1"], "--seed must be >= 0"),
        (["--base", "/nowhere"], "is not an HF model directory"),
    ):
        with pytest.raises(SystemExit):
            dip.parse_args(argv)
        assert message in capsys.readouterr().err


def test_middle_and_edges_agree_with_the_summary_gap():
    curve = {0: 0.95, 9: 0.5, 18: 0.6, 27: 0.4, 63: 0.9}
    records = _records("baseline", curve)
    parts = tiny_dip.middle_and_edges(records)
    observed = {p: sum(r["score"] for r in records if r["gold_position"] == p) / 40 for p in curve}
    middle, edges = (observed[9] + observed[18] + observed[27]) / 3, (observed[0] + observed[63]) / 2
    assert parts["middle"][0] == pytest.approx(middle) and parts["edges"][0] == pytest.approx(edges)
    for mean, low, high in parts.values():
        assert low <= mean <= high and high - low > 0.02  # 40 questions: a real interval around the mean
    gap = summarize_group(records, None)["middle_minus_edges"]
    assert parts["middle"][0] - parts["edges"][0] == pytest.approx(gap)
    assert parts["middle"][2] < parts["edges"][1]  # a 0.4-point dip on 40 questions: the intervals separate
    with pytest.raises(ValueError, match=">= 3 gold positions"):
        tiny_dip.middle_and_edges(_records("baseline", {0: 1.0, 63: 1.0}))


def test_readme_reports_every_method_with_intervals_and_times():
    curve = {0: 1.0, 9: 0.5, 18: 0.5, 27: 0.5, 36: 0.5, 45: 0.5, 54: 0.5, 63: 1.0}
    labels = [flag for _, flag in tiny_dip.METHODS]
    baseline = _records(labels[0], curve)
    records = [*baseline, *({**r, "method": labels[1]} for r in baseline)]  # the first fix changes nothing
    records += [{**r, "method": labels[2], "score": 1.0} for r in baseline]  # the second gets every one right
    records += [r for i, label in enumerate(labels[3:]) for r in _records(label, curve, seed=i + 1)]
    summary = build_summary(records, model={"path": "m"}, tasks={"kv": {}}, methods=labels, n_resamples=200)
    args = dip.parse_args(["--steps", "400"])
    timings = {name: 10.0 + i for i, (name, _) in enumerate(tiny_dip.METHODS)}
    text = tiny_dip.readme(args, dip.recipe_settings(args), summary, records, timings)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "python scripts/make_tiny_dip_base.py --seed 0 --steps 400" in text and "for 400 steps" in text
    assert "12,800 prompt/completion lines" in text and "--gold_positions 0,9,18,27,36,45,54,63" in text
    assert set(rows) >= {name for name, _ in tiny_dip.METHODS}
    assert rows["accuracy"].startswith("| accuracy | 1.00 |") and rows["accuracy"].endswith("| 1.00 |")
    assert (
        rows[tiny_dip.METHODS[1][0]].count("no difference") == 2 and "no difference" not in rows[tiny_dip.METHODS[2][0]]
    )
    missed = [r for r in baseline if r["score"] == 0.0]  # all in the middle: the edges are always right
    middle_gain, overall_gain = len(missed) / (6 * 40), len(missed) / (8 * 40)
    fixed = rows[tiny_dip.METHODS[2][0]].split(" | ")
    assert fixed[5].startswith(f"{overall_gain:+.3f} [") and fixed[7].startswith(f"{middle_gain:+.3f} [")
    assert fixed[-1] == "12 |" and rows["baseline"].endswith(" | 10 |") and len(fixed) == 11
    assert (
        f"Middle lifted (Δ middle's interval above 0, p < 0.05): {tiny_dip.METHODS[2][0]} ({middle_gain:+.3f})" in text
    )
    gap = summary["results"]["kv"]["baseline"]["middle_minus_edges"]
    assert f"{gap:+.3f} [" in rows["baseline"]


@pytest.mark.slow  # the whole script in subprocesses: trains 2 steps, evaluates every method, writes, reruns
def test_smoke_run_writes_the_asset_resumes_and_is_deterministic(tmp_path):
    work, first, second = tmp_path / "work", tmp_path / "first", tmp_path / "second"

    def make(out: Path) -> subprocess.CompletedProcess:
        command = [sys.executable, str(SCRIPT), "--out", str(out), "--work", str(work), "--steps", "2",
                   "--eval_examples", "1"]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)

    result = make(first)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {p.name for p in first.iterdir()} == ASSET_FILES
    readme = (first / "README.md").read_text()
    assert "--steps 2 --eval_examples 1" in readme and "| baseline |" in readme
    commands = (work / "commands.sh").read_text()
    assert commands.count("python -m repo_train fit") == 1 and commands.count("python -m evaluation run") == 9
    again = make(first)  # the asset exists: nothing runs
    assert again.returncode == 0 and "nothing to do" in again.stdout and (work / "commands.sh").read_text() == commands
    for step in ("models", "runs"):  # train again from scratch; the evaluation's outputs exist and are kept
        subprocess.run(["rm", "-r", str(work / step)], check=True)
    result = make(second)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (second / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    assert (work / "commands.sh").read_text().count("python -m evaluation run") == 9
