"""report.md's tables (verdicts, middle, edges), short labels, old summaries, and the figure's layout."""

from __future__ import annotations

import itertools
import json

import pytest

from evaluation import position_plot
from evaluation.report import render_report
from evaluation.results import build_summary, write_json_atomic

POSITIONS = 5
LPES = "lpes:scale_file=/runs/q/scales/rope-kv.json"
PCD = "pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30"
PI = "pi:scale=2"
SCORES = {
    "baseline": lambda q, p: q % 2 == 0 and not (0 < p < POSITIONS - 1 and q % 4 == 0),  # a middle dip
    LPES: lambda q, p: q % 2 == 0,  # lifts the dip: the middle only
    PI: lambda q, p: q == 2,  # breaks every question but one, everywhere
    PCD: lambda q, p: q % 2 == 0 and not (0 < p < POSITIONS - 1 and q % 4 == 0),  # the baseline's scores
}


def _records(methods, questions: int = 40) -> list[dict]:
    return [
        {
            "id": f"q{q:03d}-p{p}",
            "example_id": f"q{q:03d}",
            "task": "kv",
            "method": method,
            "gold_position": p,
            "num_positions": POSITIONS,
            "prediction": "",
            "answers": ["x"],
            "score": float(SCORES[method](q, p)),
            "prompt_tokens": 10,
            "truncated": False,
        }
        for method in methods
        for q in range(questions)
        for p in range(POSITIONS)
    ]


def _run(tmp_path, name: str, methods) -> object:
    out = tmp_path / name
    out.mkdir()
    summary = build_summary(
        _records(methods), {"name": f"models/{name}"}, {"kv": {"metric": "kv_containment"}}, methods
    )
    write_json_atomic(out / "summary.json", summary)
    return out


def _rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header starts with `header_start` (header included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_table_gives_middle_edges_delta_and_a_verdict(tmp_path) -> None:
    out = _run(tmp_path, "rope", list(SCORES))
    render_report(out)
    text = (out / "report.md").read_text()
    header, *rows = _rows(text, "| method | questions")
    assert header == [
        "method",
        "questions (prompts)",
        "accuracy [95% CI]",
        "middle",
        "edges",
        "Δ vs baseline [95% CI]",
        "p (Holm)",
        "verdict",
        "middle verdict",
    ]
    table = {row[0]: dict(zip(header, row)) for row in rows}
    assert list(table) == ["baseline", "lpes (rope-kv)", "pi (scale=2)", "pcd"]  # short labels, no path
    # baseline: even questions right; at the 3 middle positions those with q % 4 == 0 fail too
    assert table["baseline"]["middle"] == "0.250" and table["baseline"]["edges"] == "0.500"
    assert table["baseline"]["verdict"] == "reference"
    assert (table["lpes (rope-kv)"]["verdict"], table["lpes (rope-kv)"]["middle verdict"]) == ("helps", "helps")
    assert (table["pi (scale=2)"]["verdict"], table["pi (scale=2)"]["middle verdict"]) == ("hurts", "hurts")
    assert (table["pcd"]["verdict"], table["pcd"]["middle verdict"]) == ("identical", "identical")
    assert table["pcd"]["p (Holm)"] == "–"  # nothing differs: no p to quote
    # lpes fixes 10 questions at 3 of 5 positions: Δ = 30 / 200
    assert table["lpes (rope-kv)"]["Δ vs baseline [95% CI]"].startswith("+0.150 [")
    assert f"- lpes (rope-kv): `{LPES}`" in text  # the full spec is listed once
    details_header, *details = _rows(text, "| method | shape")
    assert details_header[-2:] == ["Δ middle [95% CI]", "p middle (Holm)"]
    mcnemar = {row[0]: row[details_header.index("McNemar p (b / c)")] for row in details}
    # lpes: right on 10 more questions (3 prompts each), wrong on none: 2 / 2^10 over questions
    assert mcnemar["lpes (rope-kv)"] == "0.002 (30 / 0)" and mcnemar["pcd"] == "–" and mcnemar["baseline"] == "–"
    assert "McNemar p (0/1 scores only, not adjusted)" in text  # the report says which test each p is


def test_a_run_too_small_to_reach_significance_says_so_beside_the_verdict(tmp_path) -> None:
    """4 questions, two methods against the baseline: the exact sign-flip p is at least 2 / 2^4 = 0.125, so Holm's
    at least 0.25, and McNemar's 0.125; PI breaks every question but one yet reads "no measurable change"."""
    methods = ["baseline", LPES, PI]
    out = tmp_path / "small"
    out.mkdir()
    summary = build_summary(
        _records(methods, questions=4), {"name": "m"}, {"kv": {"metric": "kv_containment"}}, methods
    )
    write_json_atomic(out / "summary.json", summary)
    render_report(out)
    header, *rows = _rows((out / "report.md").read_text(), "| method | questions")
    table = {row[0]: dict(zip(header, row)) for row in rows}
    note = (
        " (too few questions to reach p < 0.05: with 4 the smallest attainable p is 0.25 for the sign-flip test "
        "with Holm, 0.12 for exact McNemar)"
    )
    assert table["pi (scale=2)"]["verdict"] == "no measurable change" + note
    assert table["baseline"]["verdict"] == "reference"
    out_large = _run(tmp_path, "large", methods)  # 40 questions: significance is attainable, no note
    render_report(out_large)
    assert "too few questions" not in (out_large / "report.md").read_text()


def test_degenerate_verdicts_reach_the_report(tmp_path) -> None:
    """A method that answered nothing and one never right beside a never-right baseline: their own words, not
    "identical", and the note says what each word means."""
    records = [
        {**r, "score": 0.0, "stop_reason": "eos", "prediction": "" if r["method"] == PI else "no"}
        for r in _records(["baseline", PI, PCD], questions=10)
    ]
    out = tmp_path / "zero"
    out.mkdir()
    summary = build_summary(
        records, {"name": "models/zero"}, {"kv": {"metric": "kv_containment"}}, ["baseline", PI, PCD]
    )
    write_json_atomic(out / "summary.json", summary)
    render_report(out)
    text = (out / "report.md").read_text()
    header, *rows = _rows(text, "| method | questions")
    table = {row[0]: dict(zip(header, row)) for row in rows}
    assert (table["pi (scale=2)"]["verdict"], table["pi (scale=2)"]["middle verdict"]) == ("no answers", "no answers")
    assert table["pcd"]["verdict"] == "uninformative (every score 0)" and table["baseline"]["verdict"] == "reference"
    assert "*uninformative (every score v)* when every paired prompt scores the same v" in text
    assert "*no answers* when every answer the method generated is empty" in text
    # a baseline that answered nothing: every comparison is with silence, and its row says so
    silent = [{**r, "prediction": ""} for r in records]
    write_json_atomic(out / "summary.json", build_summary(silent, {"name": "m"}, {"kv": {}}, ["baseline", PCD]))
    render_report(out)
    rows = _rows((out / "report.md").read_text(), "| method | questions")[1:]
    assert [row[7] for row in rows] == ["reference (no answers)", "no answers"]


def test_compared_runs_prefix_their_label(tmp_path) -> None:
    rope, repo = _run(tmp_path, "rope", list(SCORES)), _run(tmp_path, "repo", ["baseline", LPES])
    render_report(rope, [repo])
    labels = [row[0] for row in _rows((rope / "report.md").read_text(), "| method | questions")[1:]]
    assert labels == [
        "rope / baseline",
        "rope / lpes (rope-kv)",
        "rope / pi (scale=2)",
        "rope / pcd",
        "repo / baseline",
        "repo / lpes (rope-kv)",
    ]


def test_a_summary_without_verdicts_still_renders(tmp_path) -> None:
    out = _run(tmp_path, "rope", list(SCORES))
    render_report(out)
    new = _rows((out / "report.md").read_text(), "| method | questions")
    summary = json.loads((out / "summary.json").read_text())
    for result in summary["results"]["kv"].values():
        for key in ("middle_accuracy", "middle_accuracy_ci", "edges_accuracy", "edges_accuracy_ci"):
            del result[key]
        if result["vs_baseline"]:
            del result["vs_baseline"]["verdict"], result["vs_baseline"]["middle"]
    write_json_atomic(out / "summary.json", summary)
    render_report(out)
    old = _rows((out / "report.md").read_text(), "| method | questions")
    # the verdict comes from the stored interval and p; middle and edges from the per-position accuracies
    assert [row[:-1] for row in old] == [row[:-1] for row in new]
    assert [row[-1] for row in old[1:]] == ["reference", "–", "–", "–"]


def _figure(monkeypatch, curves):
    figures = []
    monkeypatch.setattr(position_plot, "save_figure_atomic", lambda fig, path: figures.append(fig) or path)
    position_plot.plot_task_curves("kv", curves, "unused.png")
    monkeypatch.undo()
    return figures[0]


def _close(fig) -> None:
    import matplotlib.pyplot as plt  # after position_plot chose the Agg backend

    plt.close(fig)


def _result(accuracies) -> dict:
    return {
        "num_positions": len(accuracies),
        "by_position": {str(p): {"accuracy": a, "low": a, "high": a, "n": 40} for p, a in enumerate(accuracies)},
    }


def test_few_curves_at_one_value_are_offset_with_distinct_markers(monkeypatch) -> None:
    labels = ["baseline", "lpes (rope-kv)", "pcd", "caliope (hourglass, delta=5–1000)"]
    fig = _figure(monkeypatch, [position_plot.Curve(label, _result([1.0] * 8)) for label in labels])
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_marker() not in (None, "None", "", "_")]
    assert len({line.get_marker() for line in lines}) == len({line.get_linestyle() for line in lines}) == 4
    at_position_3 = sorted(line.get_xdata()[3] for line in lines)
    gaps = [b - a for a, b in itertools.pairwise(at_position_3)]
    assert min(gaps) > 0.1 and at_position_3[-1] - at_position_3[0] <= 0.6 + 1e-9  # apart, within a position
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels  # whole labels, not cut
    _close(fig)


def test_many_curves_get_one_panel_each_with_the_baseline_behind(monkeypatch) -> None:
    base = _result([1.0] * 8)
    curves = [position_plot.Curve("baseline", base)]
    curves += [position_plot.Curve(f"method {i}", _result([1.0] * 8), base) for i in range(7)]
    fig = _figure(monkeypatch, curves)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [curve.label for curve in curves]
    grey = [[line for line in ax.get_lines() if line.get_color() == "0.6"] for ax in panels]
    assert [len(g) for g in grey] == [0] + [1] * 7  # every method panel shows its run's baseline
    assert position_plot.OVERLAY_MAX < len(curves)
    _close(fig)


def test_seed_runs_compare_models_by_their_hashes_never_by_their_path(tmp_path) -> None:
    """The same model given as `models/x` and `./models/../models/x` is one model; other weight files are not."""
    first, second = _run(tmp_path, "seed0", ["baseline"]), _run(tmp_path, "seed1", ["baseline"])
    summary = json.loads((second / "summary.json").read_text())
    summary["model"]["name"] = "./models/../models/seed0"  # another spelling of the same directory
    (second / "summary.json").write_text(json.dumps(summary))
    pin = {"model.safetensors": {"size": 10, "sha256": "a" * 32}}
    for run in (first, second):
        (run / "run.json").write_text(json.dumps({"weights": pin}))
    assert (first / "report.md") in render_report(first, [second], seeds=True)
    (second / "run.json").write_text(json.dumps({"weights": {"model.safetensors": {"size": 10, "sha256": "b" * 32}}}))
    with pytest.raises(ValueError, match=r"differs in model\.weights"):
        render_report(first, [second], seeds=True)
