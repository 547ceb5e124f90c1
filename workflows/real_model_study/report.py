"""OUT/README.md and OUT/study.png of the study: the tables of every method, the attention-bias and
accuracy-by-position figure, each paper's claim next to what was seen, and the time of every step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from evaluation.report import delta_cell, interval_cell, p_cell
from evaluation.run_config import score_name
from repo_common.atomic import save_figure_atomic, write_text_atomic
from workflows.real_model_study.methods import lpes_name
from workflows.real_model_study.verdicts import PAPER_CLAIMS


def method_rows(summary: Mapping, names: Mapping[str, str]) -> list[dict]:
    """One row per method of a summary's mdqa results, in the summary's order, named by `names`."""
    rows = []
    for label, result in summary["results"]["mdqa"].items():
        key = next((prefix for prefix in names if label.split(":")[0] == prefix), label)
        rows.append({"key": key, "name": names.get(key, label), "label": label, "result": result})
    return rows


def table(rows: Sequence[Mapping], score: str = "metric") -> list[str]:
    lines = [
        (
            f"| method | prompts | {score_name(score)} [95% CI] | middle [95% CI] | edges | Δ vs baseline [95% CI] "
            "| p (Holm) "
            "| verdict | Δ middle [95% CI] | p middle (Holm) | middle verdict |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r = row["result"]
        vs = r.get("vs_baseline")
        middle_vs = (vs or {}).get("middle")
        lines.append(
            f"| {row['name']} | {r['n']} | {interval_cell(r['accuracy'], r['accuracy_ci'])} "
            f"| {interval_cell(r['middle_accuracy'], r['middle_accuracy_ci'])} | {interval_cell(r['edges_accuracy'], None)} "
            f"| {delta_cell(vs)} | {p_cell(vs, 'p_holm')} | {(vs or {}).get('verdict', '–')} "
            f"| {delta_cell(middle_vs)} | {p_cell(middle_vs, 'p_holm')} | {(middle_vs or {}).get('verdict', '–')} |"
        )
    return lines


def plot(bias: Mapping, baseline: Mapping, path: Path, score: str = "metric") -> None:
    import matplotlib  # heavy: only when the figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the file backend

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    curve = bias["mean"]["gold"]
    positions = [e["position"] for e in curve]  # 0-based, as the harness numbers positions
    values = [e["value"] for e in curve]
    errors = [[max(0.0, v - e["ci"][0]) for v, e in zip(values, curve)],
              [max(0.0, e["ci"][1] - v) for v, e in zip(values, curve)]]  # fmt: skip
    left.errorbar(positions, values, yerr=errors, marker="o", capsize=3, label="gold document")
    every = bias["mean"]["all_documents"]
    left.plot([e["position"] for e in every], [e["value"] for e in every], "--", color="grey",
              label="every document")  # fmt: skip
    left.set_xlabel("document position (0-based)")
    left.set_ylabel("attention per token (last prompt token)")
    left.set_title(f"Attention bias (layers {bias['layers'][0]}–{bias['layers'][-1]}, heads averaged)")
    left.set_xticks(positions)
    left.legend(fontsize=8)
    by_position = sorted(baseline["by_position"].items(), key=lambda item: int(item[0]))
    xs = [int(p) for p, _ in by_position]
    accuracy = [v["accuracy"] for _, v in by_position]
    # error bars clamped at 0: a continuous score's bootstrap bound can sit a rounding error inside its mean
    right.errorbar(
        xs,
        accuracy,
        yerr=[
            [max(0.0, a - v["low"]) for a, (_, v) in zip(accuracy, by_position)],
            [max(0.0, v["high"] - a) for a, (_, v) in zip(accuracy, by_position)],
        ],
        marker="o",
        capsize=3,
    )
    right.set_xlabel("gold document position (0-based)")
    right.set_ylabel(f"{score_name(score)} (95% CI over questions)")
    right.set_title(f"Baseline {score_name(score)} by gold position")
    right.set_xticks(xs)
    if score == "metric":
        right.set_ylim(-0.02, 1.02)
    figure.suptitle("SmolLM2-135M-Instruct, MDQA (Lost in the Middle NQ-Open), chat template")
    figure.tight_layout()
    save_figure_atomic(figure, path)
    plt.close(figure)


def _uniform_note(search: Mapping) -> list[str]:
    """Why the table has no PI row when the search gave every layer one scale: one method, listed once."""
    uniform = search.get("uniform_scale")
    if uniform is None:
        return []
    return [
        (
            f"The LPES search gave every layer the same scale, {uniform:.3f}: that is PI at {uniform:.3f}, so the "
            "two are one method, run and listed once (as LPES); PI has no row of its own."
        ),
        "",
    ]


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def report(out: Path, study: Mapping) -> str:
    size, speed = study["size"], study["speed"]
    main_rows, costly_rows = study["main_rows"], study["costly_rows"]
    baseline = main_rows[0]["result"]
    score = study.get("score", "metric")  # studies before --score: the metric
    scoring = (
        "greedy answers scored by best-subspan EM"
        if score == "metric"
        else "each prompt scored by its gold answer's mean log-probability per token, teacher-forced through each "
        "method (no generation; 0 is certainty, higher is better). PCD is not in this table: its contrast is a "
        "decoding rule, not a distribution, so its log-likelihood is not comparable with the baseline's"
    )
    lines = [
        "# Lost in the middle on SmolLM2-135M-Instruct",
        "",
        (
            f"MDQA from the Lost-in-the-Middle NQ-Open oracle file, {size['documents']} documents (the gold one and "
            f"{size['documents'] - 1} gold passages of other questions), the gold document at every position, the "
            f"model's chat template, {scoring}. Search and evaluation questions are "
            "disjoint. 95% CIs resample questions; p is a paired sign-flip test, Holm-adjusted over the methods of "
            "a table; middle = the interior positions."
        ),
        "",
        (
            f"Speed: {speed['prompts_per_second']:.2f} prompts/s for the baseline ({speed['mean_prompt_tokens']:.0f}-token "
            f"prompts, {speed['threads']} threads)."
        ),
        "",
        f"## Every method on {size['questions']} questions × {size['documents']} positions",
        "",
        *table(main_rows, score),
        "",
        *_uniform_note(study["search"]),
        f"## Found in the Middle and Attention Buckets on the first {size['costly_questions']} questions",
        "",
        *table(costly_rows, score),
        "",
        "![attention bias and accuracy by position](study.png)",
        "",
        "## LPES search",
        "",
    ]
    search = study["search"]
    held = search.get("held_out") or {}
    lines += [
        (
            f"Population {size['population']}, {size['generations']} generations, {size['search_questions']} questions "
            f"× 3 subsets (fitness), held-out {size['held_out']} questions × 3 subsets. Mean scale "
            f"{search['mean_scale']:.3f}; scales {', '.join(f'{s:.2f}' for s in search['scales'])}."
        ),
        "",
    ]
    warning = (search.get("outcome") or {}).get("warning")
    if warning:
        lines += [f"**The search's result is not a finding:** {warning}.", ""]
    if held:
        uniform = search.get("uniform_scale")
        rows = [("baseline", "baseline"), ("PI (mean scale)", "pi_mean"), ("LPES", "lpes")]
        if uniform is not None:  # the same scale on every layer: PI at the mean is LPES itself
            rows = [("baseline", "baseline"), (lpes_name([uniform]), "lpes")]
        lines += [
            "| held-out | overall | begin | middle | end |",
            "|---|---|---|---|---|",
            *(
                f"| {name} | {held[key]['overall']:.3f} | {held[key]['per_subset']['begin']:.3f} "
                f"| {held[key]['per_subset']['middle']:.3f} | {held[key]['per_subset']['end']:.3f} |"
                for name, key in rows
            ),
            "",
        ]
    bias = study["bias"]["mean"]["gold"]
    proxy = (
        []
        if score == "metric"
        else [
            (
                "The claims are about accuracy; here they are judged on the gold answer's log-likelihood, a proxy: "
                "a method that raises it makes the right answer likelier, not necessarily the one chosen."
            ),
            "",
        ]
    )
    lines += [
        "## Each paper's claim next to what was seen",
        "",
        *proxy,
        "| claim | seen here | verdict |",
        "|---|---|---|",
        f"| {PAPER_CLAIMS['bias']} | gold-document attention by position: "
        + ", ".join(f"{e['value']:.2e}" for e in bias)
        + f" | {study['claims']['bias']} |",
        f"| {PAPER_CLAIMS['accuracy']} | baseline {score_name(score)} by position: "
        + ", ".join(f"{v['accuracy']:.2f}" for _, v in sorted(baseline["by_position"].items(), key=lambda i: int(i[0])))
        + f"; middle − edges {interval_cell(baseline['middle_minus_edges'], baseline['middle_minus_edges_ci'], signed=True)}"
        + f" | {study['claims']['accuracy']} |",
    ]
    for key, seen in study["claims"].items():
        if key in ("bias", "accuracy"):
            continue
        lines.append(f"| {PAPER_CLAIMS[key]} | {seen['seen']} | {seen['verdict']} |")
    lines += ["", "## Time", "", "| step | time |", "|---|---|"]
    lines += [f"| {step} | {fmt_minutes(seconds)} |" for step, seconds in study["timings"].items()]
    lines += [f"| total | {fmt_minutes(sum(study['timings'].values()))} |", ""]
    text = "\n".join(lines)
    write_text_atomic(out / "README.md", text)
    return text
