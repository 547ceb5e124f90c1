"""The accuracy-by-position figure of a task: every method's curve with its 95% intervals, none hidden.

Methods that do nothing to a model that already retrieves everywhere all sit at
1.0, so an overlay of many curves shows one line. Up to `OVERLAY_MAX` curves
share one axes (distinct markers and line styles, small horizontal offsets);
more get one small panel each, with the run's baseline drawn in grey behind
them, so every curve is visible and compared with its own reference.
"""

from __future__ import annotations

import itertools
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from repo_common.atomic import save_figure_atomic

#: Above this many curves the figure switches from one overlay to small multiples.
OVERLAY_MAX = 4
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "*", "h")
_LINESTYLES = ("-", "--", "-.", ":")
#: Matplotlib's default cycle without its grey (C7), which the small multiples use for the baseline.
_COLOURS = tuple(f"C{i}" for i in range(10) if i != 7)


class Curve(NamedTuple):
    """One method's result in one run, its legend label, and that run's baseline result (None for the baseline)."""

    label: str
    result: Mapping[str, Any]
    reference: Mapping[str, Any] | None = None


def plot_name(task: str, score: str = "accuracy") -> str:
    """The plot's file name: what it draws (`accuracy`, `gold_loglik`: `evaluation.run_config.score_key`) by
    position, for which task."""
    return f"{score}_by_position_{re.sub(r'[^A-Za-z0-9_.-]', '_', task)}.png"


def short(label: str, width: int = 56) -> str:
    """At most `width` characters (a safety net: short method labels rarely reach it)."""
    return label if len(label) <= width else label[: width - 1] + "…"


def _points(result: Mapping[str, Any]) -> tuple[list[int], list[float], list[list[float]]]:
    """Positions, accuracies and [below, above] error bar lengths of a result's curve."""
    points = sorted((int(p), v) for p, v in result["by_position"].items())
    ys = [v["accuracy"] for _, v in points]
    # clamped at 0: a continuous score's bootstrap bounds can sit a rounding error inside its mean (one question)
    errors = [
        [max(0.0, y - v["low"]) for y, (_, v) in zip(ys, points)],
        [max(0.0, v["high"] - y) for y, (_, v) in zip(ys, points)],
    ]
    return [p for p, _ in points], ys, errors


def _style(index: int) -> dict[str, Any]:
    """Marker, line style and colour of the index-th curve: all three differ between any two overlaid curves."""
    return {
        "marker": _MARKERS[index % len(_MARKERS)],
        "linestyle": _LINESTYLES[index % len(_LINESTYLES)],
        "color": _COLOURS[index % len(_COLOURS)],
    }


def plot_task_curves(task: str, curves: Sequence[Curve], path: Path, score: str = "accuracy") -> Path:
    """Write the figure of `task` to `path`: one overlay for few curves, small multiples for many. `score` names
    the y axis (`evaluation.run_config.score_name`); only accuracy gets the fixed [0, 1] range."""
    import matplotlib  # heavy: matplotlib, only when a report is drawn

    matplotlib.use("Agg")
    num_positions = max((int(c.result["num_positions"]) for c in curves), default=0)
    xlabel = f"position of the relevant item (0-based, of {num_positions})"
    if len(curves) <= OVERLAY_MAX:
        fig = _overlay(task, curves, xlabel, score)
    else:
        fig = _small_multiples(task, curves, xlabel, score)
    return save_figure_atomic(fig, path)


def _overlay(task: str, curves: Sequence[Curve], xlabel: str, score: str = "accuracy"):
    """One axes; curves offset sideways, together by at most 60% of the gap between evaluated positions."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only when a report is drawn
    from matplotlib.ticker import MaxNLocator  # heavy: matplotlib, only when a report is drawn

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    grid = sorted({int(p) for c in curves for p in c.result["by_position"]})
    gap = min((b - a for a, b in itertools.pairwise(grid)), default=1)
    step = gap * min(0.15, 0.6 / max(len(curves) - 1, 1))  # about a marker's width apart on a grid of 8
    for index, curve in enumerate(curves):
        xs, ys, errors = _points(curve.result)
        offset = (index - (len(curves) - 1) / 2) * step
        ax.errorbar(
            [x + offset for x in xs],
            ys,
            yerr=errors,
            markersize=5,
            capsize=2,
            alpha=0.85,
            label=short(curve.label),
            **_style(index),
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(score)
    if score == "accuracy":
        ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task}: {score} by position (95% bootstrap CI)")
    ax.grid(alpha=0.3)
    # Below the axes: a legend inside would hide the curves.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=2)
    return fig


def _small_multiples(task: str, curves: Sequence[Curve], xlabel: str, score: str = "accuracy"):
    """One panel per curve, titled by its label, with the run's baseline in grey behind it."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only when a report is drawn
    from matplotlib.ticker import MaxNLocator  # heavy: matplotlib, only when a report is drawn

    columns = min(4, math.ceil(math.sqrt(len(curves))))
    rows = math.ceil(len(curves) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(2.6 * columns, 2.1 * rows + 0.6), sharex=True, sharey=True, squeeze=False
    )
    for index, (ax, curve) in enumerate(zip(axes.flat, curves)):
        if curve.reference is not None:
            ref_xs, ref_ys, _ = _points(curve.reference)
            ax.plot(ref_xs, ref_ys, color="0.6", linewidth=2.5, alpha=0.6, zorder=1)
        xs, ys, errors = _points(curve.result)
        ax.errorbar(xs, ys, yerr=errors, markersize=4, capsize=2, zorder=2, **_style(index))
        ax.set_title("\n".join(textwrap.wrap(short(curve.label, 80), 34)), fontsize=8)
        if score == "accuracy":
            ax.set_ylim(-0.04, 1.04)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.flat[len(curves) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(score, fontsize=8)
    for column in range(columns):
        # the lowest visible panel of each column carries the x ticks and label
        lowest = max(r for r in range(rows) if r * columns + column < len(curves))
        axes[lowest, column].xaxis.set_tick_params(labelbottom=True)
        axes[lowest, column].set_xlabel("position", fontsize=8)
    fig.suptitle(f"{task}: {score} by position (95% bootstrap CI); grey: the run's baseline\n{xlabel}", fontsize=9)
    fig.tight_layout()
    return fig
