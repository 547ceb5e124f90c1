"""Plots and a short markdown report from summary.json files (re-renderable at any time).

Per task, `accuracy_by_position_<task>.png` draws one curve per method (and
per model when other run directories are compared), with 95% bootstrap
intervals as error bars; `report.md` tabulates the metrics and links the plots.
When the compared runs are seeds of one setup (`seeds=True`), the report adds
the mean ± sample std over them, per method and per position.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.results import BASELINE, load_summary
from evaluation.statistics import mean_std_over_seeds
from repo_train.atomic import save_figure_atomic, write_text_atomic

REPORT_FILE = "report.md"


STATISTICS_NOTE = (
    "Intervals resample questions (all positions of a question together), except the per-position ones, "
    "which resample that position's prompts. Shape: from the per-position 95% intervals — flat (one accuracy "
    "inside every interval), U (an interior position below both edges), ramp up / ramp down (one edge below "
    "the other, nothing below the low edge or above the high one), other. ρ: 100 × Pearson correlation of "
    "accuracy with closeness to an edge (positive: the edges beat the middle on average, a U or a ramp). "
    f"Δ vs baseline: method − `{BASELINE}` on the same prompts; p: two-sided paired sign-flip test on "
    "per-question mean differences; Holm: adjusted over the methods of the table. See docs/evaluation.md."
)


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


_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "*", "h")
_LINESTYLES = ("-", "--", "-.", ":")


def plot_task(task: str, runs: Sequence[tuple[str, dict[str, Any]]], path: Path) -> None:
    """Accuracy by gold position, one curve per (model, method), error bars = bootstrap interval.

    Curves get distinct markers and line styles, and a small horizontal offset, so that methods at
    the same accuracy (often all at 1.0) stay visible instead of hiding each other.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    num_positions = 0
    curves = _curves(task, runs)
    span = max((int(p) for _, r in curves for p in r["by_position"]), default=1) or 1
    for index, (label, result) in enumerate(curves):
        points = sorted((int(p), v) for p, v in result["by_position"].items())
        offset = (index - (len(curves) - 1) / 2) * 0.012 * span
        xs = [p + offset for p, _ in points]
        ys = [v["accuracy"] for _, v in points]
        errors = [[y - v["low"] for y, (_, v) in zip(ys, points)], [v["high"] - y for y, (_, v) in zip(ys, points)]]
        ax.errorbar(
            xs,
            ys,
            yerr=errors,
            marker=_MARKERS[index % len(_MARKERS)],
            linestyle=_LINESTYLES[(index // len(_MARKERS) + index) % len(_LINESTYLES)],
            markersize=5,
            capsize=2,
            alpha=0.85,
            label=_short(label),
        )
        num_positions = max(num_positions, int(result["num_positions"]))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"position of the relevant item (0-based, of {num_positions})")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task}: accuracy by position (95% bootstrap CI)")
    ax.grid(alpha=0.3)
    # Below the axes: a legend inside would hide the curves.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=2)
    save_figure_atomic(fig, path)


def _interval(value: Any, bounds: Sequence[Any] | None, digits: int = 3) -> str:
    if not bounds or bounds[0] is None:
        return _fmt(value, digits)
    return f"{_fmt(value, digits)} [{_fmt(bounds[0], digits)}, {_fmt(bounds[1], digits)}]"


def _p(vs: dict[str, Any] | None, key: str) -> str:
    if not vs:
        return "–"
    if vs.get("identical"):
        return "no difference on any example"
    value = vs.get(key)
    return "–" if value is None else ("< 0.001" if value < 0.001 else f"{value:.3f}")


def _table(task: str, runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        (
            "| method | questions (prompts) | accuracy [95% CI] | shape | middle − edges [95% CI] | ρ [95% CI] "
            "| worst position (acc) | Δ vs baseline [95% CI] | p (two-sided) | p (Holm) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in _curves(task, runs):
        vs = r.get("vs_baseline")
        delta = _interval(vs["mean_diff"], [vs["low"], vs["high"]]) if vs else "–"
        worst = "– (flat)" if r["worst_position"] is None else f"{r['worst_position']} ({_fmt(r['worst_accuracy'])})"
        lines.append(
            f"| {label} | {r['n_examples']} ({r['n']}) | {_interval(r['accuracy'], r['accuracy_ci'])} "
            f"| {r['shape'] or '–'} | {_interval(r['middle_minus_edges'], r['middle_minus_edges_ci'])} "
            f"| {_interval(r['rho'], r['rho_ci'], 1)} | {worst} | {delta} | {_p(vs, 'p_value')} | {_p(vs, 'p_holm')} |"
        )
    return lines


def _mean_std(values: Sequence[Any], digits: int = 3) -> str:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return "–"
    stats = mean_std_over_seeds(finite)
    spread = "" if stats.n < 2 else f" ± {stats.std:.{digits}f}"
    return f"{stats.mean:.{digits}f}{spread}" + ("" if stats.n == len(values) else f" ({stats.n} defined)")


def seed_tables(task: str, summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Mean ± sample std (ddof=1) over seed runs, per method and per position, with the number of seeds."""
    methods = list(dict.fromkeys(m for s in summaries for m in s["results"].get(task, {})))
    positions = sorted(
        {int(p) for s in summaries for r in s["results"].get(task, {}).values() for p in r["by_position"]}
    )
    lines = [
        "| method | seeds | accuracy | middle − edges | ρ | Δ vs baseline |",
        "|---|---|---|---|---|---|",
    ]
    per_position = [
        "| method | " + " | ".join(str(p) for p in positions) + " |",
        "|---|" + "---|" * len(positions),
    ]
    for method in methods:
        results = [s["results"][task][method] for s in summaries if method in s["results"].get(task, {})]
        deltas = [r["vs_baseline"]["mean_diff"] for r in results if r.get("vs_baseline")]
        lines.append(
            f"| {method} | {len(results)} | {_mean_std([r['accuracy'] for r in results])} "
            f"| {_mean_std([r['middle_minus_edges'] for r in results])} | {_mean_std([r['rho'] for r in results], 1)} "
            f"| {_mean_std(deltas) if deltas else '–'} |"
        )
        cells = [
            _mean_std([r["by_position"][str(p)]["accuracy"] for r in results if str(p) in r["by_position"]], 2)
            for p in positions
        ]
        per_position.append(f"| {method} | " + " | ".join(cells) + " |")
    return [*lines, "", "By position (mean ± std over seeds):", "", *per_position]


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


def render_report(out: str | Path, compare: Sequence[str | Path] = (), seeds: bool = False) -> list[Path]:
    """Write the plots and report.md into `out` from its summary.json (plus other run dirs to overlay).

    `seeds`: `out` and `compare` are runs of one setup under different seeds; add mean ± std over them.
    """
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
        if seeds:
            lines += ["", f"Over {len(runs)} seeds (mean ± sample std, ddof = 1):", "", *seed_tables(task, summaries)]
        lines += ["", f"![accuracy by position, {task}]({path.name})"]
    lines += ["", STATISTICS_NOTE]
    report = write_text_atomic(out / REPORT_FILE, "\n".join(lines) + "\n")
    return [*written, report]
