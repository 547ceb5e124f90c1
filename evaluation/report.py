"""Plots and a short markdown report from summary.json files (re-renderable at any time).

Per task, `accuracy_by_position_<task>.png` (`gold_loglik_by_position_<task>.png` for the gold
log-likelihood) draws one curve per method (and
per model when other run directories are compared), with 95% bootstrap
intervals as error bars; `report.md` tabulates accuracy, middle, edges and the
comparison with the baseline ending in a verdict word, then the curve details,
and links the plots. Methods are named by short labels (`evaluation.method_labels`),
listed once with their full specs. When the compared runs are seeds of one setup
(`seeds=True`), the report adds the mean ± sample std over them, per method and
per position.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.method_labels import short_labels
from evaluation.position_metrics import middle_and_edges
from evaluation.position_plot import Curve, plot_name, plot_task_curves
from evaluation.results import BASELINE, comparison_verdict, load_summary
from evaluation.run_config import score_key, score_name
from evaluation.run_directory import MANIFEST_FILE
from evaluation.search_overlap import overlap_lines
from evaluation.statistics import mean_std_over_seeds, smallest_attainable_p
from repo_common.atomic import write_text_atomic

REPORT_FILE = "report.md"


STATISTICS_NOTE = (
    "Intervals resample questions (all positions of a question together), except the per-position ones, "
    "which resample that position's prompts. Shape: from the per-position 95% intervals — flat (one accuracy "
    "inside every interval), U (an interior position below both edges), ramp up / ramp down (one edge below "
    "the other, nothing below the low edge or above the high one), other. ρ: 100 × Pearson correlation of "
    "accuracy with closeness to an edge (positive: the edges beat the middle on average, a U or a ramp). "
    f"Δ vs baseline: method − `{BASELINE}` on the same prompts; p: two-sided paired sign-flip test on "
    "per-question mean differences; Holm: adjusted over the methods of the table; McNemar p (0/1 scores only, "
    "not adjusted): the exact McNemar test on the discordant prompts (b: right with the method only, c: with the "
    "baseline only), clustered by question (a two-sided binomial over the questions each side wins). Middle: mean "
    "accuracy of the "
    "interior positions, edges: of the first and last; Δ middle compares the interior positions' prompts only. "
    "Verdict: *no answers* when every answer the method generated is empty (whatever it scored), *uninformative "
    "(every score v)* when every paired prompt scores the same v with the method and the baseline (v = 0: neither "
    "is ever right, so equal scores say nothing about the method), *identical* when no paired prompt differs "
    "otherwise, *helps* when the 95% interval of Δ lies above 0 and p (Holm) < 0.05, *hurts* when it lies below 0 "
    "and p (Holm) < 0.05, otherwise *no measurable change*; the middle verdict applies the same rule to Δ middle. "
    "A reference row whose every answer is empty says *reference (no answers)*. See docs/evaluation.md#statistics."
)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _method_labels(runs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """Short, distinct labels of every method spec of every run (`evaluation.method_labels.short_labels`)."""
    specs = [m for _, summary in runs for m in summary.get("methods", [])]
    specs += [m for _, summary in runs for by_method in summary["results"].values() for m in by_method]
    return short_labels(specs)


def _curves(
    task: str, runs: Sequence[tuple[str, dict[str, Any]]], labels: dict[str, str] | None = None
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, result, summary) of every method of every run that evaluated `task`; compared runs prefix the label."""
    labels = labels or _method_labels(runs)
    curves = []
    for model_label, summary in runs:
        for method, result in summary["results"].get(task, {}).items():
            label = labels.get(method, method)
            if len(runs) > 1:
                label = f"{Path(model_label).name or model_label} / {label}"
            curves.append((label, result, summary))
    return curves


def plot_task(
    task: str, runs: Sequence[tuple[str, dict[str, Any]]], path: Path, labels: dict[str, str] | None = None
) -> Path:
    """Accuracy by gold position of every (run, method) that evaluated `task` (`evaluation.position_plot`)."""
    curves = []
    for label, result, summary in _curves(task, runs, labels):
        baseline = summary["results"][task].get(BASELINE)
        curves.append(Curve(label, result, None if result is baseline else baseline))
    return plot_task_curves(task, curves, path, task_score_name(runs, task))


def task_score_name(runs: Sequence[tuple[str, dict[str, Any]]], task: str) -> str:
    """What the first run's numbers for `task` are (`score_name`): accuracy, or the gold log-likelihood."""
    return score_name(runs[0][1].get("tasks", {}).get(task, {}).get("metric"))


def interval_cell(value: Any, bounds: Sequence[Any] | None, digits: int = 3, signed: bool = False) -> str:
    """A table cell `value [low, high]` (the report's and the quickstart's tables)."""

    def fmt(v: Any) -> str:
        return f"{v:+.{digits}f}" if signed and isinstance(v, float) and math.isfinite(v) else _fmt(v, digits)

    if not bounds or bounds[0] is None:
        return fmt(value)
    return f"{fmt(value)} [{fmt(bounds[0])}, {fmt(bounds[1])}]"


def p_cell(vs: dict[str, Any] | None, key: str) -> str:
    """A p-value cell; "–" without a comparison or when nothing differs (the verdict says "identical")."""
    if not vs or vs.get("identical"):
        return "–"
    value = vs.get(key)
    return "–" if value is None else ("< 0.001" if value < 0.001 else f"{value:.3f}")


def mcnemar_cell(vs: dict[str, Any] | None) -> str:
    """The clustered exact McNemar p with the discordant counts (b: method only, c: baseline only); "–" for scores
    that are not 0/1, without a comparison, or when nothing differs."""
    test = (vs or {}).get("mcnemar")
    if not test or vs.get("identical"):
        return "–"
    return f"{p_cell(test, 'p_value')} ({test['method_only']} / {test['baseline_only']})"


def delta_cell(vs: dict[str, Any] | None) -> str:
    """A Δ cell of a `vs_baseline` entry: the difference with its 95% interval, signed; "–" without one."""
    return interval_cell(vs["mean_diff"], [vs["low"], vs["high"]], signed=True) if vs else "–"


def power_note(vs: dict[str, Any] | None, comparisons: int, alpha: float) -> str:
    """Beside a verdict: that the run has too few questions for any result to reach significance, if so."""
    if not vs or vs.get("identical") or not vs.get("n_examples"):
        return ""
    holm, mcnemar = smallest_attainable_p(vs["n_examples"], comparisons)
    if holm < alpha:
        return ""
    return (
        f" (too few questions to reach p < {alpha:g}: with {vs['n_examples']} the smallest attainable p is "
        f"{holm:.2g} for the sign-flip test with Holm, {mcnemar:.2g} for exact McNemar)"
    )


def _middle_edges(result: dict[str, Any]) -> tuple[Any, Any]:
    """Middle and edge accuracy: stored by newer summaries, else from the per-position accuracies."""
    if "middle_accuracy" in result:
        return result["middle_accuracy"], result["edges_accuracy"]
    return middle_and_edges({int(p): v["accuracy"] for p, v in result["by_position"].items()})


def _table(task: str, runs: Sequence[tuple[str, dict[str, Any]]], labels: dict[str, str] | None = None) -> list[str]:
    """The task's main table (what each method does to accuracy, and the verdicts) and its details table."""
    score = task_score_name(runs, task)
    main = [
        (
            f"| method | questions (prompts) | {score} [95% CI] | middle | edges | Δ vs baseline [95% CI] "
            "| p (Holm) | verdict | middle verdict |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    details = [
        (
            f"| method | shape | middle − edges [95% CI] | ρ [95% CI] | worst position ({score}) | p (two-sided) "
            "| McNemar p (b / c) | Δ middle [95% CI] | p middle (Holm) |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r, summary in _curves(task, runs, labels):
        alpha = float(summary.get("bootstrap", {}).get("alpha", 0.05))
        vs = r.get("vs_baseline")
        middle_vs = vs.get("middle") if vs else None
        middle, edges = _middle_edges(r)
        none = "reference" if r is summary["results"][task].get(BASELINE) else "–"  # no comparison
        if none == "reference" and r.get("empty_answers") and r["empty_answers"] == r["n"]:
            none = "reference (no answers)"  # every comparison is then with a model that said nothing
        comparisons = sum(1 for result in summary["results"][task].values() if result.get("vs_baseline"))
        verdict = (comparison_verdict(vs, alpha) or none) + power_note(vs, comparisons, alpha)
        middle_verdict = comparison_verdict(middle_vs, alpha) or ("–" if vs else none)
        main.append(
            f"| {label} | {r['n_examples']} ({r['n']}) | {interval_cell(r['accuracy'], r['accuracy_ci'])} "
            f"| {_fmt(middle)} | {_fmt(edges)} | {delta_cell(vs)} | {p_cell(vs, 'p_holm')} | {verdict} | {middle_verdict} |"
        )
        worst = "– (flat)" if r["worst_position"] is None else f"{r['worst_position']} ({_fmt(r['worst_accuracy'])})"
        details.append(
            f"| {label} | {r['shape'] or '–'} "
            f"| {interval_cell(r['middle_minus_edges'], r['middle_minus_edges_ci'], signed=True)} "
            f"| {interval_cell(r['rho'], r['rho_ci'], 1)} | {worst} | {p_cell(vs, 'p_value')} | {mcnemar_cell(vs)} "
            f"| {delta_cell(middle_vs)} | {p_cell(middle_vs, 'p_holm')} |"
        )
    single = [label for label, r, _ in _curves(task, runs, labels) if r.get("n_examples") == 1]
    if single:
        note = f"{', '.join(single)}: one question (n=1), so no interval (no CI) and no shape is given."
        main += ["", note]
    return [*main, "", "Curve details:", "", *details]


def _mean_std(values: Sequence[Any], digits: int = 3) -> str:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return "–"
    stats = mean_std_over_seeds(finite)
    spread = "" if stats.n < 2 else f" ± {stats.std:.{digits}f}"
    return f"{stats.mean:.{digits}f}{spread}" + ("" if stats.n == len(values) else f" ({stats.n} defined)")


def _verdict_counts(results: Sequence[dict[str, Any]], alphas: Sequence[float]) -> str:
    """How often each verdict came out over the seeds, e.g. "helps ×2, no measurable change ×1"."""
    verdicts = [comparison_verdict(r.get("vs_baseline"), a) for r, a in zip(results, alphas)]
    counts = Counter(v for v in verdicts if v)
    return ", ".join(f"{v} ×{n}" for v, n in counts.most_common()) or "–"


def seed_tables(task: str, summaries: Sequence[dict[str, Any]], labels: dict[str, str] | None = None) -> list[str]:
    """Mean ± sample std (ddof=1) over seed runs, per method and per position, with the number of seeds."""
    methods = list(dict.fromkeys(m for s in summaries for m in s["results"].get(task, {})))
    labels = labels or short_labels(methods)
    positions = sorted(
        {int(p) for s in summaries for r in s["results"].get(task, {}).values() for p in r["by_position"]}
    )
    lines = [
        "| method | seeds | accuracy | middle − edges | ρ | Δ vs baseline | verdicts |",
        "|---|---|---|---|---|---|---|",
    ]
    per_position = [
        "| method | " + " | ".join(str(p) for p in positions) + " |",
        "|---|" + "---|" * len(positions),
    ]
    for method in methods:
        having = [s for s in summaries if method in s["results"].get(task, {})]
        results = [s["results"][task][method] for s in having]
        alphas = [float(s.get("bootstrap", {}).get("alpha", 0.05)) for s in having]
        deltas = [r["vs_baseline"]["mean_diff"] for r in results if r.get("vs_baseline")]
        label = labels.get(method, method)
        lines.append(
            f"| {label} | {len(results)} | {_mean_std([r['accuracy'] for r in results])} "
            f"| {_mean_std([r['middle_minus_edges'] for r in results])} | {_mean_std([r['rho'] for r in results], 1)} "
            f"| {_mean_std(deltas) if deltas else '–'} | {_verdict_counts(results, alphas)} |"
        )
        cells = [
            _mean_std([r["by_position"][str(p)]["accuracy"] for r in results if str(p) in r["by_position"]], 2)
            for p in positions
        ]
        per_position.append(f"| {label} | " + " | ".join(cells) + " |")
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


def examples_line(spec: dict[str, Any], results: dict[str, Any]) -> str:
    """Which source examples the task's numbers use (a reader checks them against a search's)."""
    first = int(spec.get("params", {}).get("example_offset", 0))
    counts = {r.get("n_examples") for r in results.values()} - {None}
    if len(counts) != 1:
        return f"Source examples from index {first}."
    count = counts.pop()
    return f"Source examples {first}-{first + count - 1} ({count})."


def seed_run_setup(summary: Mapping[str, Any], weights: Any = None) -> dict[str, Any]:
    """What seed runs of one setup share: the model (by its class, config hash and weight files, never by the
    path it was given as), the decoding, the methods, and per task its parameters other than the seed, its
    decoding and its metric. `weights`: run.json's weight-file pin (None for the tiny default, whose seed is
    the run's)."""
    model = dict(summary.get("model") or {})
    tasks = {}
    for task, spec in (summary.get("tasks") or {}).items():
        spec = dict(spec) if isinstance(spec, Mapping) else {}
        params = {k: v for k, v in (spec.get("params") or {}).items() if k != "seed"}
        tasks[task] = {**{k: v for k, v in spec.items() if k not in ("params", "rows")}, "params": params}
    return {
        "model": {"class": model.get("class"), "config_sha256": model.get("config_sha256"), "weights": weights},
        "decode": summary.get("decode"),
        "methods": summary.get("methods"),
        "tasks": tasks,
    }


def check_seed_runs(directories: Sequence[Path], summaries: Sequence[Mapping[str, Any]]) -> None:
    """Refuse `--seeds` over runs that are not seeds of one setup (another model, task, decoding or method), and
    a run given twice (it would count as two seeds)."""
    seen: dict[Path, Path] = {}
    for directory in directories:
        first_given = seen.setdefault(directory.resolve(), directory)
        if first_given is not directory:
            raise ValueError(
                f"--seeds: {directory} is the run {first_given} again, which would count one seed twice; give each "
                "seed's run once"
            )
    first = seed_run_setup(summaries[0], _pinned_weights(directories[0]))
    for directory, summary in zip(directories[1:], summaries[1:]):
        other = seed_run_setup(summary, _pinned_weights(directory))
        differs = []
        for key, value in first.items():
            if isinstance(value, Mapping) and isinstance(other[key], Mapping):
                differs += [f"{key}.{k}" for k in sorted({*value, *other[key]}) if value.get(k) != other[key].get(k)]
            elif value != other[key]:
                differs.append(key)
        if differs:
            raise ValueError(
                f"--seeds: {directory} is not a seed of the setup of {directories[0]} (differs in "
                f"{', '.join(differs)}); compare such runs without --seeds"
            )


def _pinned_weights(directory: Path) -> Any:
    """The weight files a run directory's run.json pinned (None when it has none: the tiny default, an old run)."""
    try:
        weights = json.loads((directory / MANIFEST_FILE).read_text()).get("weights")
    except (OSError, ValueError, AttributeError):
        return None
    return None if isinstance(weights, Mapping) and "tiny_default_seed" in weights else weights


def check_same_scores(directories: Sequence[Path], summaries: Sequence[Mapping[str, Any]]) -> None:
    """Refuse to overlay a task's accuracy with another run's gold log-likelihood: one axis, one score."""
    scores: dict[str, tuple[str, Path]] = {}
    for directory, summary in zip(directories, summaries):
        for task, spec in (summary.get("tasks") or {}).items():
            name = score_name((spec or {}).get("metric"))
            first = scores.setdefault(task, (name, directory))
            if first[0] != name:
                raise ValueError(
                    f"--compare: task {task!r} is scored by {first[0]} in {first[1]} and by {name} in {directory}; "
                    "compare runs of one score (--score), or report them apart"
                )


def render_report(out: str | Path, compare: Sequence[str | Path] = (), seeds: bool = False) -> list[Path]:
    """Write the plots and report.md into `out` from its summary.json (plus other run dirs to overlay).

    `seeds`: `out` and `compare` are runs of one setup under different seeds; add mean ± std over them.
    """
    out = Path(out)
    directories = [Path(directory) for directory in (out, *compare)]
    summaries = [load_summary(directory) for directory in directories]
    check_same_scores(directories, summaries)
    if seeds:  # mean ± std over runs of different setups would be a number about nothing
        check_seed_runs(directories, summaries)
    runs = list(zip(run_labels(directories, summaries), summaries))
    main = runs[0][1]
    tasks = list(dict.fromkeys(task for _, summary in runs for task in summary["results"]))
    labels = _method_labels(runs)
    lines = [
        "# Evaluation report",
        "",
        f"Model: `{main['model'].get('name')}` ({main['model'].get('class')}, config {main['model'].get('config_sha256')}).",
        f"Decoding: greedy; {', '.join(f'{k}={v}' for k, v in main.get('decode', {}).items()) or 'settings unknown'}.",
    ]
    if len(runs) > 1:
        lines.append(f"Compared with: {', '.join(f'`{label}`' for label, _ in runs[1:])}.")
    lines += ["", "Methods (label: full spec):", ""]
    lines += [f"- {label}: `{spec}`" if label != spec else f"- {label}" for spec, label in labels.items()]
    if main.get("methods_left_out"):
        left_out = ", ".join(f"`{m}`" for m in main["methods_left_out"])
        lines += ["", f"Not in this report: {left_out}, whose records an earlier run here wrote (records.jsonl)."]
    written = []
    for task in tasks:
        spec = main["tasks"].get(task, {})
        path = out / plot_name(task, score_key(spec.get("metric")))
        plot_task(task, runs, path, labels)
        written.append(path)
        lines += ["", f"## {task}", "", f"Parameters: `{spec.get('params', {})}`, metric `{spec.get('metric')}`."]
        overlap = overlap_lines(main.get("search_overlap", {}), task)
        lines += [examples_line(spec, main["results"].get(task, {})), *overlap, ""]
        lines += _table(task, runs, labels)
        if seeds:
            over_seeds = seed_tables(task, summaries, labels)
            lines += ["", f"Over {len(runs)} seeds (mean ± sample std, ddof = 1):", "", *over_seeds]
        lines += ["", f"![{task_score_name(runs, task)} by position, {task}]({path.name})"]
    lines += ["", STATISTICS_NOTE]
    report = write_text_atomic(out / REPORT_FILE, "\n".join(lines) + "\n")
    return [*written, report]
