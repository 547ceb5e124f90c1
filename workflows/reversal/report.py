"""OUT/results.json, OUT/results.md and OUT/reversal.png of the reproduction, with the paper's claim."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from evaluation.results import write_json_atomic
from repo_common.atomic import save_figure_atomic, write_text_atomic
from workflows.reversal.options import Reversal
from workflows.reversal.results import aggregate
from workflows.reversal.training import EVAL_SEED

FORMAT_VERSION = 1


PAPER_CLAIM = (
    "All three methods are near perfect on the training lengths (<= 20); beyond length 20, REPO keeps a higher "
    "accuracy than RoPE and NoPE (REPO paper, appendix C)."
)


def _cell(stats: Mapping | None) -> str:
    return "n/a" if stats is None else f"{stats['mean']:.3f} ± {stats['std']:.3f}"


def _seed_cell(method_stats: Mapping, index: int) -> str:
    """'in / out' accuracy means of the index-th seed of a method."""
    per_length = method_stats["per_length"]
    parts = []
    for key in ("in_distribution", "extrapolation"):
        if method_stats[key] is not None:
            low, high = method_stats[key]["lengths"]
            parts.append(statistics.fmean(per_length[n]["by_seed"][index] for n in per_length if low <= n <= high))
    return " / ".join(f"{v:.3f}" for v in parts)


def results_markdown(results: Mapping, table_lengths: Sequence[int] = (2, 5, 10, 15, 20, 22, 25, 30)) -> str:
    settings, methods = results["settings"], results["methods"]
    shown = [n for n in table_lengths if all(n in m["per_length"] for m in methods.values())]
    all_lengths = sorted(next(iter(methods.values()))["per_length"]) if methods else []
    train = f"{settings['train_min']}-{settings['train_max']}"
    lines = [
        "# REPO appendix C: text reversal",
        "",
        (
            f"Exact-match accuracy, mean ± sample std over {settings['seeds']} seed(s), "
            f"{settings['examples_per_length']} test sequences per length; trained on lengths {train}."
        ),
        "",
        "| method | in distribution | extrapolation | " + " | ".join(f"L={n}" for n in shown) + " |",
        "|---|---|---|" + "---|" * len(shown),
    ]
    for method, m in methods.items():
        cells = [_cell(m["per_length"][n]) for n in shown]
        lines.append(
            f"| {method} | {_cell(m['in_distribution'])} | {_cell(m['extrapolation'])} | " + " | ".join(cells) + " |"
        )
    lines += ["", "## Every length", "", "| length | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for n in all_lengths:
        lines.append(f"| {n} | " + " | ".join(_cell(m["per_length"][n]) for m in methods.values()) + " |")
    lines += [
        "",
        "## Per seed (in distribution / extrapolation)",
        "",
        "| method | " + " | ".join(f"seed {i}" for i in next(iter(methods.values()))["seeds"]) + " |",
        "|---|" + "---|" * len(next(iter(methods.values()))["seeds"]),
    ]
    for method, m in methods.items():
        lines.append(f"| {method} | " + " | ".join(_seed_cell(m, i) for i in range(len(m["seeds"]))) + " |")
    failures = {method: m["beyond_training"] for method, m in methods.items() if m.get("beyond_training")}
    if failures:
        lines += [
            "",
            f"## What the models output beyond length {settings['train_max']} (pooled over seeds)",
            "",
            f"| method | n | mean words predicted (gold) | exactly {settings['train_max']} words | correct prefix "
            + "| correct suffix |",
            "|---|---|---|---|---|---|",
        ]
        for method, f in failures.items():
            lines.append(
                f"| {method} | {f['n']} | {f['mean_predicted_words']:.1f} ({f['mean_gold_words']:.1f}) "
                f"| {f['stops_at_train_max']:.2f} | {f['correct_prefix']:.2f} | {f['correct_suffix']:.2f} |"
            )
    lines += ["", f"Paper: {PAPER_CLAIM}", "", "## Settings", "", "```json", json.dumps(settings, indent=2), "```"]
    return "\n".join(lines) + "\n"


def plot_results(results: Mapping, path: Path) -> None:
    import matplotlib  # heavy: only when the figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the file backend

    settings = results["settings"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, m in results["methods"].items():
        lengths = sorted(m["per_length"])
        mean = [m["per_length"][n]["mean"] for n in lengths]
        std = [m["per_length"][n]["std"] for n in lengths]
        (line,) = ax.plot(lengths, mean, marker="o", markersize=3, label=method)
        ax.fill_between(
            lengths,
            [max(0.0, a - s) for a, s in zip(mean, std)],  # accuracy lives in [0, 1]
            [min(1.0, a + s) for a, s in zip(mean, std)],
            color=line.get_color(),
            alpha=0.2,
        )
    ax.axvline(settings["train_max"], color="gray", linestyle="--", linewidth=1, label="longest training length")
    ax.set_xlabel("sequence length (words)")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"Text reversal, 4-layer d={settings['hidden']}, {settings['seeds']} seed(s), mean ± std")
    ax.legend()
    fig.tight_layout()
    save_figure_atomic(fig, path)


def write_results(
    out: Path, args: Reversal, per_seed, runs: Mapping[str, Mapping], failures: Mapping | None = None
) -> dict:
    settings = {
        "seeds": args.seeds,
        "methods": args.methods,
        "steps": args.steps,
        "hidden": args.hidden,
        "layers": 4,
        "heads": 4,
        "lr": args.lr,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "train_examples": args.train_examples,
        "train_min": args.train_min,
        "train_max": args.train_max,
        "test_min": args.test_min,
        "test_max": args.test_max,
        "examples_per_length": args.examples_per_length,
        "eval_seed": EVAL_SEED,
        "tokenizer": "word-level (evaluation.tasks.reversal_tokenizer)",
        "threads": args.threads,
    }
    methods = aggregate(per_seed, args.train_max)
    for method, stats in (failures or {}).items():
        methods[method]["beyond_training"] = stats
    results = {
        "format_version": FORMAT_VERSION,
        "settings": settings,
        "methods": methods,
        "runs": runs,
        "paper_claim": PAPER_CLAIM,
    }
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "results.md", results_markdown(results))
    plot_results(results, out / "reversal.png")
    return results
