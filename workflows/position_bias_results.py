"""The position-bias reproduction's numbers over seeds: per-method statistics, results.md and the plot.

Each seed's harness result becomes accuracy overall, at the edges the training put the gold
at, in the middle (outside them), rho (the U-shape index) and per position; the reproduction
reports mean +- sample std of each over seeds, next to the base model before training.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from evaluation.statistics import mean_std_over_seeds
from repo_common.atomic import save_figure_atomic

PAPER_CLAIMS = {
    "lpes": "LPES: up to +11.2% on KV retrieval, mostly from the middle positions, over the unscaled model and "
    "ahead of uniform scaling (PI).",
    "calibrators": "CALIOPE, Found in the Middle and PCD: higher accuracy for middle positions of RoPE LLMs, "
    "flattening the U-shape.",
}


def position_stats(result: Mapping, edges: Sequence[int]) -> dict:
    """Accuracy overall, at the trained edges, in the middle, rho, and per position, from one harness result."""
    by_position = {int(p): float(cell["accuracy"]) for p, cell in result["by_position"].items()}
    middle = [a for p, a in by_position.items() if p not in edges]
    at_edges = [a for p, a in by_position.items() if p in edges]
    paired = result.get("vs_baseline")  # the harness's paired comparison with the baseline on the same prompts
    return {
        "accuracy": float(result["accuracy"]),
        "delta": None if not paired else float(paired["mean_diff"]),
        "delta_p": None if not paired else float(paired["p_value"]),
        "middle": statistics.fmean(middle) if middle else None,
        "edges": statistics.fmean(at_edges) if at_edges else None,
        "rho": result["rho"],
        "by_position": by_position,
    }


def aggregate(per_seed: Mapping[int, Mapping[str, Mapping]]) -> dict[str, dict]:
    """seed -> method -> position_stats  =>  method -> mean and std over seeds of each number."""

    def over_seeds(values):
        values = [v for v in values if v is not None]
        if not values:
            return None
        stats = mean_std_over_seeds(values)
        return {"mean": stats.mean, "std": stats.std if len(values) > 1 else None}  # no spread from one seed

    seeds = sorted(per_seed)
    methods = list(per_seed[seeds[0]])
    out = {}
    for method in methods:
        rows = [per_seed[s][method] for s in seeds]
        positions = sorted(rows[0]["by_position"])
        out[method] = {
            **{key: over_seeds([r[key] for r in rows]) for key in ("accuracy", "delta", "middle", "edges", "rho")},
            "delta_p_by_seed": {s: per_seed[s][method]["delta_p"] for s in seeds},
            "by_position": {p: over_seeds([r["by_position"][p] for r in rows]) for p in positions},
            "by_seed": {s: per_seed[s][method]["accuracy"] for s in seeds},
        }
    return out


def _cell(stats: Mapping | None, digits: int = 3) -> str:
    if stats is None:
        return "n/a"
    spread = "" if stats["std"] is None else f" ± {stats['std']:.{digits}f}"
    return f"{stats['mean']:.{digits}f}{spread}"


def results_markdown(results: Mapping) -> str:
    settings, methods, base = results["settings"], results["methods"], results["base"]
    positions = sorted(next(iter(methods.values()))["by_position"])
    lines = [
        "# LPES and the calibrators on a tiny RoPE model that lost the middle",
        "",
        (
            f"Mean ± sample std over {len(results['seeds'])} seed(s); held-out: {settings['eval_examples']} examples "
            f"× {len(positions)} gold positions of {settings['pairs']} pairs ({settings['distinct_keys']} distinct "
            f"keys). Training gold: the first/last {settings['edge_width']} pairs ({settings['edge_share']:.0%} of "
            "examples). 'middle' = evaluated positions outside those edges."
        ),
        "",
        "| method | accuracy | Δ vs baseline | middle | edges | ρ |",
        "|---|---|---|---|---|---|",
        (
            f"| base model (before) | {base['accuracy']:.3f} | | {_fmt(base['middle'])} | {_fmt(base['edges'])} "
            f"| {_fmt(base['rho'], 1)} |"
        ),
    ]
    for name, m in methods.items():
        lines.append(
            f"| {name} | {_cell(m['accuracy'])} | {_cell(m['delta'])} | {_cell(m['middle'])} | {_cell(m['edges'])} "
            f"| {_cell(m['rho'], 1)} |"
        )
    lines += [
        "",
        "Δ vs baseline: the harness's paired difference on the same prompts (mean over seeds); two-sided p per "
        "seed (paired sign-flip test on per-question mean differences): "
        + "; ".join(
            f"{name} " + ", ".join(_fmt(p) for p in m["delta_p_by_seed"].values())
            for name, m in methods.items()
            if any(p is not None for p in m["delta_p_by_seed"].values())
        )
        + ".",
        "",
        "## Accuracy by gold position (mean over seeds)",
        "",
    ]
    lines += ["| method | " + " | ".join(str(p) for p in positions) + " |", "|---|" + "---|" * len(positions)]
    lines.append("| base model | " + " | ".join(f"{base['by_position'][p]:.2f}" for p in positions) + " |")
    for name, m in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{m['by_position'][p]['mean']:.2f}" for p in positions) + " |")
    lines += ["", "## LPES scales per seed (layers 0 to L-1)", ""]
    for seed, record in results["scales"].items():
        lines.append(f"- seed {seed}: {', '.join(f'{s:.2f}' for s in record['scales'])} (mean {record['mean']:.3f})")
    lines += [
        "",
        "## Per seed (accuracy)",
        "",
        "| method | " + " | ".join(f"seed {s}" for s in results["seeds"]) + " |",
    ]
    lines.append("|---|" + "---|" * len(results["seeds"]))
    for name, m in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{m['by_seed'][s]:.3f}" for s in results["seeds"]) + " |")
    lines += ["", "## Paper claims", "", *(f"- {claim}" for claim in PAPER_CLAIMS.values()), ""]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def plot(results: Mapping, path: Path) -> None:
    import matplotlib  # heavy: loads only when the plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: loads only when the plot is drawn

    figure, axis = plt.subplots(figsize=(8, 5.5))
    base = results["base"]["by_position"]
    axis.plot(sorted(base), [base[p] for p in sorted(base)], "k:", marker=".", label="base model (before)")
    for name, m in results["methods"].items():
        positions = sorted(m["by_position"])
        means = [m["by_position"][p]["mean"] for p in positions]
        stds = [m["by_position"][p]["std"] or 0.0 for p in positions]
        axis.errorbar(positions, means, yerr=stds, marker="o", capsize=3, label=name)
    edge_width, pairs = results["settings"]["edge_width"], results["settings"]["pairs"]
    for low, high in ((0, edge_width - 1), (pairs - edge_width, pairs - 1)):
        axis.axvspan(low - 0.5, high + 0.5, color="grey", alpha=0.15)
    axis.set_xlabel("gold pair position (0-based; shaded: where training put the gold)")
    axis.set_ylabel("accuracy")
    axis.set_ylim(-0.02, 1.02)
    axis.set_title(f"Tiny RoPE model trained with edge-only gold, {len(results['seeds'])} seed(s)")
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)  # below
    figure.tight_layout()
    save_figure_atomic(figure, path)
    plt.close(figure)
