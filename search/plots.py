"""The pictures of a search: the scale curve over layers, fitness over generations, and the structure deviation
D per layer of the searched scales and their variants (`python -m search diagnose`; matplotlib, Agg).

All are written through a temporary file and `os.replace`, like every other
output, so a reader never sees half a PNG.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from repo_common.atomic import save_figure_atomic


def _save(fig, path: str | os.PathLike) -> Path:
    return save_figure_atomic(fig, path)


def plot_curve(path: str | os.PathLike, scale_file: Mapping[str, Any], title: str = "") -> Path:
    """Per-layer scales s_h (markers), their mean (= PI's single scale) and the control points with their polygon."""
    scales = list(scale_file["scales"])
    points = scale_file.get("control_points") or []
    curve = scale_file.get("curve", {}).get("type", "none")
    fig, ax = plt.subplots(figsize=(7, 4))
    layers = range(len(scales))
    ax.plot(layers, scales, "o-", color="tab:blue", label=f"s_h ({curve} curve)" if points else "s_h (per layer)")
    mean = sum(scales) / len(scales)
    ax.axhline(mean, color="grey", linestyle=":", label=f"mean {mean:.3g} (pi:scale)")
    if points:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, "s--", color="tab:red", alpha=0.7, label="control points")
    low, high = min(scales + [p[1] for p in points]), max(scales + [p[1] for p in points])
    ax.set_ylim(min(0.9, low - 0.05), max(2.1, high + 0.05))
    ax.set_xlabel("layer h")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
    ax.set_ylabel("scale s_h (positions / s_h)")
    ax.set_title(title or "LPES scales")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _save(fig, path)


def plot_fitness(
    path: str | os.PathLike, log: Sequence[Mapping[str, Any]], title: str = "", unscaled: float | None = None
) -> Path:
    """Best-so-far and population mean fitness per generation, the best individual's subset accuracies, and
    the unscaled model's fitness on the same search set (what a scaling has to beat)."""
    generations = [line["generation"] for line in log]
    fig, ax = plt.subplots(figsize=(7, 4))
    if unscaled is not None:
        ax.axhline(unscaled, color="tab:purple", linestyle="-.", label=f"unscaled model (all s_h = 1): {unscaled:.3g}")
    ax.plot(generations, [line["best"] for line in log], "o-", color="black", label="best (Eq. 7)")
    ax.plot(generations, [line["mean"] for line in log], ".--", color="grey", label="population mean")
    for subset, color in (("begin", "tab:green"), ("middle", "tab:red"), ("end", "tab:blue")):
        values = [line.get("best_per_subset", {}).get(subset) for line in log]
        if all(v is not None for v in values):
            ax.plot(generations, values, ":", color=color, alpha=0.8, label=f"best: {subset}")
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness / accuracy")
    ax.set_title(title or "LPES search")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if generations:
        ax.set_xticks(generations if len(generations) <= 25 else generations[:: max(1, len(generations) // 10)])
    return _save(fig, path)


#: Line style of each variant of `search.structure.scaling_variants` (searched solid and on top).
_VARIANT_STYLE = {
    "searched": ("o-", "tab:blue"),
    "uniform": ("s--", "grey"),
    "noisy": ("^:", "tab:green"),
    "shuffled": ("v-.", "tab:orange"),
    "random": ("x:", "tab:red"),
}


def plot_structure(path: str | os.PathLike, structure: Mapping[str, Any], title: str = "") -> Path:
    """Figure-3 style: D_h per layer, one line per scale variant; the legend gives the mean D and smoothness S."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, entry in reversed(list(structure["variants"].items())):
        style, color = _VARIANT_STYLE.get(name, (".-", None))
        values = entry["D_per_layer"]
        smooth = "n/a" if entry.get("S") is None else f"{entry['S']:.3f}"
        label = f"{name}: D {entry['D']:.4f}, S {smooth}"
        ax.plot(range(len(values)), values, style, color=color, label=label, zorder=3 if name == "searched" else 2)
    handles, labels = ax.get_legend_handles_labels()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer h (its output)")
    ax.set_ylabel("D_h: relative change of the token cosine matrix")
    ax.set_title(title or "representational structure deviation")
    ax.grid(alpha=0.3)
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _save(fig, path)
