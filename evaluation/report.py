"""Plots and a short markdown report from summary.json files (re-renderable at any time).

Per task, `accuracy_by_position_<task>.png` draws one curve per method (and
per model when other run directories are compared), with 95% bootstrap
intervals as error bars; `report.md` tabulates the metrics and links the plots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.results import BASELINE, load_summary
from repo_train.atomic import save_figure_atomic, write_text_atomic

REPORT_FILE = "report.md"


def plot_name(task: str) -> str:
    return f"accuracy_by_position_{re.sub(r'[^A-Za-z0-9_.-]', '_', task)}.png"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _curves(task: str, runs: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """(label, result) of every method of every run that evaluated `task`."""
    curves = []
    for model_label, summary in runs:
        for method, result in summary["results"].get(task, {}).items():
            label = method if len(runs) == 1 else f"{Path(model_label).name or model_label} / {method}"
            curves.append((label, result))
    return curves


def _short(label: str, width: int = 60) -> str:
    """A legend entry of at most `width` characters (the report's table has the full spec)."""
    return label if len(label) <= width else label[: width - 1] + "…"


def plot_task(task: str, runs: Sequence[tuple[str, dict[str, Any]]], path: Path) -> None:
    """Accuracy by gold position, one curve per (model, method), error bars = bootstrap interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    num_positions = 0
    for label, result in _curves(task, runs):
        points = sorted((int(p), v) for p, v in result["by_position"].items())
        xs = [p for p, _ in points]
        ys = [v["accuracy"] for _, v in points]
        errors = [[y - v["low"] for y, (_, v) in zip(ys, points)], [v["high"] - y for y, (_, v) in zip(ys, points)]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=_short(label))
        num_positions = max(num_positions, int(result["num_positions"]))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"position of the relevant item (0-based, of {num_positions})")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task}: accuracy by position (95% bootstrap CI)")
    ax.grid(alpha=0.3)
    # Below the axes: method specs are long, and a legend inside would hide the curves.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    save_figure_atomic(fig, path)


def _table(task: str, runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        "| method | n | accuracy [95% CI] | ρ (U-shape) | worst position (acc) | middle − edges | Δ vs baseline [95% CI] | p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in _curves(task, runs):
        low, high = r["accuracy_ci"]
        vs = r.get("vs_baseline")
        delta = f"{_fmt(vs['mean_diff'])} [{_fmt(vs['low'])}, {_fmt(vs['high'])}]" if vs else "–"
        lines.append(
            f"| {label} | {r['n']} | {_fmt(r['accuracy'])} [{_fmt(low)}, {_fmt(high)}] | {_fmt(r['rho'], 1)} | "
            f"{r['worst_position']} ({_fmt(r['worst_accuracy'])}) | {_fmt(r['middle_minus_edges'])} | {delta} | "
            f"{_fmt(vs['p_value']) if vs else '–'} |"
        )
    return lines


def run_labels(directories: Sequence[Path], summaries: Sequence[dict[str, Any]]) -> list[str]:
    """One distinct label per compared run: the model's name; its run directory when models repeat (seeds,
    calibrated and plain runs of one model); "run N" when those repeat too."""
    names = [summary["model"].get("name") or str(directory) for directory, summary in zip(directories, summaries)]
    labels = []
    for i, (name, directory) in enumerate(zip(names, directories)):
        if names.count(name) > 1:
            same_dir = sum(d.name == directory.name for d, n in zip(directories, names) if n == name) > 1
            name = f"{Path(name).name} [{f'run {i + 1}' if same_dir else directory.name}]"
        labels.append(name)
    return labels


def render_report(out: str | Path, compare: Sequence[str | Path] = ()) -> list[Path]:
    """Write the plots and report.md into `out` from its summary.json (plus other run dirs to overlay)."""
    out = Path(out)
    directories = [Path(directory) for directory in (out, *compare)]
    summaries = [load_summary(directory) for directory in directories]
    runs = list(zip(run_labels(directories, summaries), summaries))
    main = runs[0][1]
    tasks = list(dict.fromkeys(task for _, summary in runs for task in summary["results"]))
    lines = [
        "# Evaluation report",
        "",
        f"Model: `{main['model'].get('name')}` ({main['model'].get('class')}, config {main['model'].get('config_sha256')}).",
        f"Methods: {', '.join(f'`{m}`' for m in main['methods'])}.",
        f"Decoding: greedy; {', '.join(f'{k}={v}' for k, v in main.get('decode', {}).items()) or 'settings unknown'}.",
    ]
    if len(runs) > 1:
        lines.append(f"Compared with: {', '.join(f'`{label}`' for label, _ in runs[1:])}.")
    written = []
    for task in tasks:
        spec = main["tasks"].get(task, {})
        path = out / plot_name(task)
        plot_task(task, runs, path)
        written.append(path)
        lines += ["", f"## {task}", "", f"Parameters: `{spec.get('params', {})}`, metric `{spec.get('metric')}`.", ""]
        lines += _table(task, runs)
        lines += ["", f"![accuracy by position, {task}]({path.name})"]
    lines += [
        "",
        (
            "ρ: 100 × Pearson correlation of accuracy with closeness to an edge (positive = U-shape, lost middle). "
            f"Δ vs baseline: paired bootstrap over the same examples against `{BASELINE}`; p = P(Δ ≤ 0)."
        ),
    ]
    report = write_text_atomic(out / REPORT_FILE, "\n".join(lines) + "\n")
    return [*written, report]
