#!/usr/bin/env python
"""Make assets/tiny-kv-dip: the built-in tiny RoPE model with a measured lost-in-the-middle dip.

    python scripts/make_tiny_dip_base.py [--out assets/tiny-kv-dip] [--work outputs/tiny-kv-dip-work]

The quickstart must open on a model whose middle is worth repairing and must
still fit in minutes on a CPU, so the dip is trained once, here, and shipped.
The recipe is the one of scripts/reproduce_position_bias.py (its `train_model`,
so both scripts make the same model from the same seed): continue
assets/tiny-kv-base with RoPE through the Lightning path (`python -m repo_train
fit`, then `export`) on 64-pair key-value streams (8 distinct keys, 193 tokens)
whose gold pair is always in the first or last 4 pairs.

The model is then measured on held-out prompts (another seed, gold at 8 evenly
spaced pairs): the baseline and the calibrators that the quickstart offers
against the dip, one `python -m evaluation run` per method (timed, since the
quickstart's budget is set by them), then one command that summarizes them
together. OUT gets the model files and a README.md with the command, the
recipe, and the accuracy by position, middle and edges with 95% intervals.

Every step whose output exists in WORK is skipped, so an interrupted run
resumes by rerunning the same command. OUT is written at once (a staging
directory moved into place); an existing OUT is left alone: delete it to remake.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
sys.path.insert(0, str(ROOT / "scripts"))  # the recipe lives in the reproduction script beside this one

import reproduce_position_bias as recipe_script

from evaluation.results import RECORDS_FILE, compare_with_baseline, load_summary, read_records, write_json_atomic
from evaluation.statistics import PositionTable, cluster_bootstrap_curves, percentile_interval
from repo_common.atomic import atomic_directory
from repo_common.config_cli import ConfigParser, parse_script
from repo_train.export import EXPORT_MANIFEST
from workflows.commands import CommandRunner

OUT = ROOT / "assets" / "tiny-kv-dip"
#: (short name, --method flag), baseline first. CALIOPE's gaps are sized to this context (the added positions stay
#: within the ~200 the model was trained on, the rule of reproduce_position_bias.py); the published ones add
#: thousands and are kept to show that; PI at a few scales.
METHODS = (
    ("baseline", "baseline"),
    ("CALIOPE hourglass, context-sized gaps (δ 0–0.25)", "caliope:calibrator=hourglass,delta_min=0,delta_max=0.25"),
    ("CALIOPE moses, context-sized gap (4)", "caliope:calibrator=moses,delta_gap=4"),
    ("CALIOPE hourglass, published gaps (δ 5–1000)", "caliope:calibrator=hourglass,delta_min=5,delta_max=1000"),
    ("CALIOPE moses, published gap (10,000)", "caliope:calibrator=moses,delta_gap=10000"),
    ("PI, scale 1.25", "pi:scale=1.25"),
    ("PI, scale 1.5", "pi:scale=1.5"),
    ("PI, scale 2", "pi:scale=2"),
)


PROG = "scripts/make_tiny_dip_base.py"


def build_parser() -> ConfigParser:
    """The asset's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument(
        "--out", type=str, default=str(OUT), help="HF model directory to write (left alone if it exists)"
    )
    parser.add_argument(
        "--work", type=str, default="outputs/tiny-kv-dip-work", help="training and evaluation outputs (resumes)"
    )
    parser.add_argument("--base", type=str, default=str(recipe_script.BASE), help="RoPE HF model to continue")
    parser.add_argument("--seed", type=int, default=0, help="training seed (data, gold placement, seed_everything)")
    parser.add_argument("--steps", type=int, default=400, help="continual-training steps")
    parser.add_argument(
        "--eval_examples", "--eval-examples", type=int, default=50, help="held-out examples per gold position"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per command (OMP_NUM_THREADS)")
    return parser


def check_options(args: argparse.Namespace) -> None:
    """The domain checks, each a ValueError naming the option (jsonargparse checked the types)."""
    for name in ("steps", "eval_examples", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.seed < 0:
        raise ValueError("--seed must be >= 0")
    if not (Path(args.base) / "config.json").is_file():
        raise ValueError(f"--base {args.base!r} is not an HF model directory (make one: scripts/pretrain_tiny_base.py)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv, check_options)


def recipe(args: argparse.Namespace) -> argparse.Namespace:
    """The reproduction script's settings (its defaults: 64 pairs, 8 keys, edges of 4, lr 1e-3) with ours."""
    return recipe_script.parse_args(
        ["--base", args.base, "--steps", str(args.steps), "--eval-examples", str(args.eval_examples),
         "--threads", str(args.threads), "--seeds", "1"]
    )  # fmt: skip


# ------------------------------------------------------------------ held-out evaluation
def evaluate(model: Path, eval_dir: Path, run: CommandRunner, settings: argparse.Namespace) -> dict[str, float]:
    """Each method alone (timed; skipped once timed), then all of them summarized together; seconds per method."""
    timings_path = eval_dir.with_name(f"{eval_dir.name}-seconds.json")  # beside the harness's directory
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    for index, (name, flag) in enumerate(METHODS):
        if name not in timings:
            command = recipe_script.eval_command(model, eval_dir, [flag], settings)
            log = eval_dir.parent / "logs" / f"eval-{index}.log"
            timings[name] = round(run(f"evaluate {name}", *command, log=log), 1)
            write_json_atomic(timings_path, timings)
    if not _summarizes_every_method(eval_dir):  # every record exists by now: this only writes the joint summary
        command = recipe_script.eval_command(model, eval_dir, [flag for _, flag in METHODS], settings)
        run("summarize every method", *command, log=eval_dir.parent / "logs" / "eval-summary.log")
    return timings


def _summarizes_every_method(eval_dir: Path) -> bool:
    if not (eval_dir / "summary.json").is_file():
        return False
    try:
        recipe_script.method_results(load_summary(eval_dir / "summary.json"), METHODS)
    except ValueError:
        return False
    return True


def middle_and_edges(records: Sequence[Mapping], n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0):
    """Accuracy of the interior positions and of the two outermost ones, each with a 95% interval.

    Resampled by question (`example_id`) like the summary's middle − edges, with the same seed, so the three
    numbers come from the same resamples: {"middle": (mean, low, high), "edges": (...)}.
    """
    table = PositionTable.from_records(records)
    if len(table.positions) < 3:
        raise ValueError(f"middle and edges need >= 3 gold positions, got {table.positions}")
    _, curves = cluster_bootstrap_curves(table, n_resamples, seed)
    observed = table.sums.sum(axis=0) / table.counts.sum(axis=0)
    out = {}
    for part, columns in (("middle", slice(1, -1)), ("edges", [0, -1])):
        low, high = percentile_interval(curves[:, columns].mean(axis=1), alpha)
        out[part] = (float(np.mean(observed[columns])), low, high)
    return out


# ------------------------------------------------------------------ README
def readme(args: argparse.Namespace, settings: argparse.Namespace, summary: Mapping, records: Sequence[Mapping],
           timings: Mapping[str, float]) -> str:  # fmt: skip
    """The asset's README: what it is, the command and recipe that made it, and what it measured."""
    results = recipe_script.method_results(summary, METHODS)
    labels = {name: next(k for k, v in summary["results"]["kv"].items() if v is r) for name, r in results.items()}
    base = results["baseline"]
    positions = sorted(int(p) for p in base["by_position"])
    cells = [base["by_position"][str(p)] for p in positions]
    command = ["python", "scripts/make_tiny_dip_base.py", "--seed", str(args.seed), "--steps", str(args.steps),
               "--eval-examples", str(args.eval_examples), "--threads", str(args.threads)]  # fmt: skip
    lines = [
        "# tiny-kv-dip",
        "",
        "The built-in tiny RoPE OLMo-2 of `assets/tiny-kv-base` (4 layers, 128 wide, byte tokenizer), continued so",
        "that it **loses the middle**: it retrieves a key's value when the key-value pair is near the start or the",
        f"end of a {settings.pairs}-pair context and often misses it in between: a dip for the quickstart's methods",
        "to repair. Made by this project (same licence as the code); no external data.",
        "",
        "## How it was made",
        "",
        "```bash",
        f"OMP_NUM_THREADS={args.threads} {shlex.join(command)}",
        "```",
        "",
        _recipe_paragraph(args, settings),
        "",
        "## Measured on held-out prompts",
        "",
        _measurement_paragraph(args, settings, positions),
        "",
        "Baseline accuracy by gold position:",
        "",
        "| position | " + " | ".join(str(p) for p in positions) + " |",
        "|---|" + "---|" * len(positions),
        "| accuracy | " + " | ".join(f"{c['accuracy']:.2f}" for c in cells) + " |",
        "| 95% interval | " + " | ".join(f"{c['low']:.2f}–{c['high']:.2f}" for c in cells) + " |",
        "",
        (
            f"Every method on the same prompts. Middle: positions {', '.join(map(str, positions[1:-1]))}; edges: "
            f"{positions[0]} and {positions[-1]}. Δ: the paired difference with the baseline over all positions, "
            "Δ middle: over the middle ones; p: two-sided sign-flip test on per-question differences (overall: "
            "Holm-adjusted over the methods in brackets). Seconds: one `evaluation run` of that method alone, startup "
            "included, on a 2-core machine shared with other jobs."
        ),
        "",
        "| method | accuracy | middle | edges | middle − edges | Δ | p (Holm) | Δ middle | p | shape | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    own = {name: [r for r in records if r["task"] == "kv" and r["method"] == labels[name]] for name in results}
    middle = set(positions[1:-1])
    base_middle = [r for r in own["baseline"] if r["gold_position"] in middle]
    lifted = []
    for name, result in results.items():
        paired_middle = None
        if name != "baseline":
            paired_middle = compare_with_baseline([r for r in own[name] if r["gold_position"] in middle], base_middle)
            if paired_middle and paired_middle["low"] > 0 and paired_middle["p_value"] < 0.05:
                lifted.append(f"{name} ({paired_middle['mean_diff']:+.3f})")
        lines.append(_method_row(name, result, middle_and_edges(own[name]), paired_middle, timings[name]))
    flags = "; ".join(f"{name}: `{labels[name]}`" for name in results)
    lines += [
        "",
        f"Middle lifted (Δ middle's interval above 0, p < 0.05): {', '.join(lifted) or 'by none of them'}.",
        "",
        f"Method flags (`--method`): {flags}.",
        "",
    ]
    return "\n".join(lines)


def _recipe_paragraph(args: argparse.Namespace, settings: argparse.Namespace) -> str:
    return (
        "`scripts/make_tiny_dip_base.py` runs the recipe of `scripts/reproduce_position_bias.py` (its "
        f"`train_model`) for seed {args.seed}: continue `assets/tiny-kv-base` with RoPE for {settings.steps} steps "
        "through the Lightning path (`python -m repo_train fit`, then `python -m repo_train export`), batch 32, peak "
        f"lr {settings.lr:g} with 20 warm-up steps and linear decay, fp32, one process. Data: "
        f"{settings.steps * 32:,} prompt/completion lines (loss on the value) of the harness's kv task with the "
        f"`pairs` template: {settings.pairs} pairs drawn from {settings.distinct_keys} one-character keys that repeat "
        f"(the gold key once), {3 * settings.pairs + 1} tokens, task seed {1000 + args.seed}; the gold pair moved "
        f"to one of the first or last {settings.edge_width} pairs in {settings.edge_share:.0%} of the lines "
        f"(placement seed {args.seed}). Every command it ran is in commands.sh of its `--work` directory."
    )


def _measurement_paragraph(args: argparse.Namespace, settings: argparse.Namespace, positions: Sequence[int]) -> str:
    seed = recipe_script.EVAL_SEED
    return (
        "`python -m evaluation run --tasks kv --task-param kv:template=pairs --task-param kv:key_chars=1 "
        f"--task-param kv:distinct_keys={settings.distinct_keys} --num-keys {settings.pairs} --num-examples "
        f"{settings.eval_examples} --seed {seed} --gold-positions {','.join(map(str, positions))}`: "
        f"{settings.eval_examples} questions × {len(positions)} gold positions (seed {seed}; training used "
        f"{1000 + args.seed}), scored by the release's case-insensitive containment. Intervals: 95% percentile "
        "bootstrap, by question for pooled numbers."
    )


def _method_row(name: str, result: Mapping, parts: Mapping[str, tuple], middle: Mapping | None, seconds: float) -> str:
    gap = _interval(result["middle_minus_edges"], *result["middle_minus_edges_ci"], signed=True)
    delta, p = _paired(result["vs_baseline"], holm=True)
    delta_middle, p_middle = _paired(middle, holm=False)
    return (
        f"| {name} | {_interval(result['accuracy'], *result['accuracy_ci'])} | {_interval(*parts['middle'])} "
        f"| {_interval(*parts['edges'])} | {gap} | {delta} | {p} | {delta_middle} | {p_middle} | {result['shape']} "
        f"| {seconds:.0f} |"
    )


def _paired(paired: Mapping | None, holm: bool) -> tuple[str, str]:
    """Δ with its interval and p (with Holm's in brackets) of one comparison with the baseline; blanks without one."""
    if not paired:
        return "", ""
    delta = _interval(paired["mean_diff"], paired["low"], paired["high"], signed=True)
    if paired["identical"]:
        return delta, "no difference"
    return delta, _p(paired["p_value"]) + (f" ({_p(paired['p_holm'])})" if holm else "")


def _interval(mean: float, low: float, high: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (low, high)):
        return f"{mean:{sign}.3f}"
    return f"{mean:{sign}.3f} [{low:{sign}.3f}, {high:{sign}.3f}]"


def _p(value: float) -> str:
    return f"{value:.2g}" if value >= 0.001 else "< 0.001"


# ------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"{out} exists: nothing to do (delete it to make it again)")
        return
    settings = recipe(args)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run = CommandRunner(
        work, description="Commands of scripts/make_tiny_dip_base.py, in order.", cwd=ROOT, fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)},
    )  # fmt: skip
    model = recipe_script.train_model(args.seed, work, run, settings)
    eval_dir = work / "eval" / f"seed{args.seed}"
    timings = evaluate(model, eval_dir, run, settings)
    summary = load_summary(eval_dir / "summary.json")
    text = readme(args, settings, summary, read_records(eval_dir / RECORDS_FILE), timings)
    with atomic_directory(out) as staging:
        for path in sorted(model.iterdir()):
            if path.is_file() and path.name != EXPORT_MANIFEST:  # the export's bookkeeping (a work-dir path) stays
                shutil.copy2(path, staging / path.name)
        (staging / "README.md").write_text(text)
    base = recipe_script.method_results(summary, METHODS)["baseline"]
    print(f"wrote {out}: baseline accuracy {base['accuracy']:.3f}, middle − edges {base['middle_minus_edges']:+.3f}")


if __name__ == "__main__":
    main()
