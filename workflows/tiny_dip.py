"""The shipped dip model's measurement and README (workflows/assets/tiny-kv-dip, made by
scripts/make_tiny_dip_base.py): every method the quickstart offers against the dip, timed alone, and the
accuracy by position, middle and edges with 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from evaluation.results import compare_with_baseline, load_summary, write_json_atomic
from evaluation.statistics import PositionTable, cluster_bootstrap_curves, percentile_interval
from workflows import position_bias as recipe
from workflows.commands import CommandRunner

#: (short name, --methods flag), baseline first. CALIOPE's gaps are sized to this context (the added positions stay
#: within the ~200 the model was trained on, the rule of workflows/position_bias.py); the published ones add
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


def evaluate(model: Path, eval_dir: Path, run: CommandRunner, settings: argparse.Namespace) -> dict[str, float]:
    """Each method alone (timed; skipped once timed), then all of them summarized together; seconds per method."""
    timings_path = eval_dir.with_name(f"{eval_dir.name}-seconds.json")  # beside the harness's directory
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    for index, (name, flag) in enumerate(METHODS):
        if name not in timings:
            command = recipe.eval_command(model, eval_dir, [flag], settings)
            log = eval_dir.parent / "logs" / f"eval-{index}.log"
            timings[name] = round(run(f"evaluate {name}", *command, log=log), 1)
            write_json_atomic(timings_path, timings)
    if not _summarizes_every_method(eval_dir):  # every record exists by now: this only writes the joint summary
        command = recipe.eval_command(model, eval_dir, [flag for _, flag in METHODS], settings)
        run("summarize every method", *command, log=eval_dir.parent / "logs" / "eval-summary.log")
    return timings


def _summarizes_every_method(eval_dir: Path) -> bool:
    if not (eval_dir / "summary.json").is_file():
        return False
    try:
        recipe.method_results(load_summary(eval_dir / "summary.json"), METHODS)
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
    results = recipe.method_results(summary, METHODS)
    labels = {name: next(k for k, v in summary["results"]["kv"].items() if v is r) for name, r in results.items()}
    base = results["baseline"]
    positions = sorted(int(p) for p in base["by_position"])
    cells = [base["by_position"][str(p)] for p in positions]
    command = ["python", "scripts/make_tiny_dip_base.py", "--seed", str(args.seed), "--steps", str(args.steps),
               "--eval_examples", str(args.eval_examples), "--threads", str(args.threads)]  # fmt: skip
    lines = [
        "# tiny-kv-dip",
        "",
        "The built-in tiny RoPE OLMo-2 of `workflows/assets/tiny-kv-base` (4 layers, 128 wide, byte tokenizer),",
        "continued so that it **loses the middle**: it retrieves a key's value when the key-value pair is near the",
        f"start or the end of a {settings.pairs}-pair context and often misses it in between: a dip for the",
        "quickstart's methods to repair. Made by this project (same licence as the code); no external data.",
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
        "| 95% interval | "
        + " | ".join(f"{c['low']:.2f}–{c['high']:.2f}" if c["low"] is not None else "–" for c in cells)
        + " |",
        "",
        (
            f"Every method on the same prompts. Middle: positions {', '.join(map(str, positions[1:-1]))}; edges: "
            f"{positions[0]} and {positions[-1]}. Δ: the paired difference with the baseline over all positions, "
            "Δ middle: over the middle ones; p: two-sided sign-flip test on per-question differences (overall: "
            "Holm-adjusted over the methods in brackets). Seconds: one `evaluation run` of that method alone, startup "
            "included, on the machine that built it (its load not controlled)."
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
            if (
                paired_middle
                and paired_middle["low"] is not None
                and paired_middle["low"] > 0
                and paired_middle["p_value"] < 0.05
            ):
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
        "`scripts/make_tiny_dip_base.py` runs the recipe of `workflows/position_bias.py` (its "
        f"`train_model`) for seed {args.seed}: continue `workflows/assets/tiny-kv-base` with RoPE for {settings.steps} "
        "steps through the Lightning path (`python -m repo_train fit`, then `python -m repo_train export`), batch 32, peak "
        f"lr {settings.lr:g} with 20 warm-up steps and linear decay, fp32, one process. Data: "
        f"{settings.steps * 32:,} prompt/completion lines (loss on the value) of the harness's kv task with the "
        f"`pairs` template: {settings.pairs} pairs drawn from {settings.distinct_keys} one-character keys that repeat "
        f"(the gold key once), {3 * settings.pairs + 1} tokens, task seed {1000 + args.seed}; the gold pair moved "
        f"to one of the first or last {settings.edge_width} pairs in {settings.edge_share:.0%} of the lines "
        f"(placement seed {args.seed}). Every command it ran is in commands.sh of its `--work` directory."
    )


def _measurement_paragraph(args: argparse.Namespace, settings: argparse.Namespace, positions: Sequence[int]) -> str:
    seed = recipe.EVAL_SEED
    return (
        "`python -m evaluation run --tasks kv --task_param kv:template=pairs --task_param kv:key_chars=1 "
        f"--task_param kv:distinct_keys={settings.distinct_keys} --num_keys {settings.pairs} --num_examples "
        f"{settings.eval_examples} --seed {seed} --gold_positions {','.join(map(str, positions))}`: "
        f"{settings.eval_examples} questions × {len(positions)} gold positions (seed {seed}; training used "
        f"{1000 + args.seed}), scored by the release's case-insensitive containment. Intervals: 95% percentile "
        "bootstrap, by question for pooled numbers."
    )


def _method_row(name: str, result: Mapping, parts: Mapping[str, tuple], middle: Mapping | None, seconds: float) -> str:
    gap = _interval(result["middle_minus_edges"], *(result["middle_minus_edges_ci"] or (None, None)), signed=True)
    delta, p = _paired(result["vs_baseline"], holm=True)
    delta_middle, p_middle = _paired(middle, holm=False)
    return (
        f"| {name} | {_interval(result['accuracy'], *(result['accuracy_ci'] or (None, None)))} | {_interval(*parts['middle'])} "
        f"| {_interval(*parts['edges'])} | {gap} | {delta} | {p} | {delta_middle} | {p_middle} | {result['shape']} "
        f"| {seconds:.0f} |"
    )


def _paired(paired: Mapping | None, holm: bool) -> tuple[str, str]:
    """Δ with its interval and p (with Holm's in brackets) of one comparison with the baseline; blanks without one."""
    if not paired:
        return "", ""
    delta = _interval(paired["mean_diff"], paired["low"], paired["high"], signed=True)
    if paired.get("no_answers"):
        return delta, "no answers"
    if paired.get("constant_score") is not None:  # equal because nothing could differ, not "no difference"
        return delta, f"every score {paired['constant_score']:g}"
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
