"""The quickstart's report, OUT/README.md: the results table with Δ, CIs, Holm p and verdict words, the outputs,
each step's time, and the text of its mode (what the tiny models are evidence of, or what a loop file ran).
"""

from __future__ import annotations

import json
from pathlib import Path

from evaluation.method_labels import short_labels
from evaluation.report import delta_cell, interval_cell, p_cell
from evaluation.results import compare_with_baseline, comparison_verdict, read_records
from evaluation.statistics import holm_adjust
from workflows import loop_config
from workflows import position_bias as recipe

METHOD_NAMES = {"rope": "RoPE", "repo": "REPO"}


def repo_positions_sentence(positions: dict, steps: int) -> str:
    """The report's sentence on REPO's learned positions: how far they spread, and what that means for its row."""
    tokens, widest = positions["tokens"], max(max(spans) for spans in positions["spans"].values())
    where = f"in its REPO layers ({positions['start_layer']}–{max(positions['spans'])}), on one {tokens}-token prompt"
    if widest < 1.0:
        return (
            f"**REPO's positions did not learn in {steps} steps**: {where}, every head's positions span at most "
            f"{widest:.2f} (RoPE's span {tokens - 1}), so those layers see almost no order (NoPE-like) and the "
            '`repo` row measures that, not REPO (why: docs/training.md, "Why REPO\'s positions start near 0").'
        )
    narrowest = min(min(spans) for spans in positions["spans"].values())
    return (
        f"**REPO's positions learned in {steps} steps**: {where}, per-head spans run from {narrowest:.1f} to "
        f"{widest:.1f} (RoPE's span {tokens - 1}; `repo_positions_last_layer.png`); whether they carry the order "
        "the task needs, the `repo` row and its Δ against the base show."
    )


def continued_comparisons(eval_dirs: dict[str, Path]) -> dict[str, list[dict]]:
    """The continued models' baselines against the base's, paired by prompt (same questions and positions): per
    model, [overall, middle] comparisons (Δ, 95% CI by question, sign-flip p) with Holm over the two models."""

    def baseline_records(name: str) -> list[dict]:
        return [r for r in read_records(eval_dirs[name] / "records.jsonl") if r["method"] == "baseline"]

    base = baseline_records("base")
    edges = {min(r["gold_position"] for r in base), max(r["gold_position"] for r in base)}
    rows = {}
    for name in ("rope", "repo"):
        records = baseline_records(name)
        middle = [r for r in records if r["gold_position"] not in edges]
        rows[name] = [compare_with_baseline(records, base), compare_with_baseline(middle, base)]
    for i in (0, 1):
        holm = holm_adjust({name: row[i]["p_value"] for name, row in rows.items()})
        for name, row in rows.items():
            row[i] = {**row[i], "p_holm": holm[name]}
    return rows


def continued_against_base(comparisons: dict[str, list[dict]]) -> list[str]:
    """The table of `continued_comparisons`: Δ overall and in the middle, CI, Holm p, verdict."""
    lines = [
        "| model | Δ vs the base [95% CI] | p (Holm) | verdict | Δ middle vs the base [95% CI] | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, parts in comparisons.items():
        cells = [cell for vs in parts for cell in (delta_cell(vs), p_cell(vs, "p_holm"), _verdict(vs))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _verdict(vs: dict) -> str:
    """The harness's verdict word (no answers and every-score-equal comparisons included) at Holm's p."""
    return comparison_verdict(vs)


def continued_sentence(comparisons: dict[str, list[dict]]) -> str:
    """One bold line: what continuing did to each model against the base (Δ overall, CI, verdict)."""
    parts = [
        f"{METHOD_NAMES[name]} {delta_cell(vs)}, {_verdict(vs)}"  # one question: no interval
        for name, (vs, _) in comparisons.items()
    ]
    return "**Against the base they came from, accuracy changed by " + "; ".join(parts) + ".**"


def results_table(eval_dirs: dict[str, Path]) -> list[str]:
    """Per (model, method, task): accuracy, middle, edges, Δ vs that model's baseline overall and in the middle,
    each with its 95% CI and Holm-adjusted p, and the verdict words computed from them (docs/evaluation.md)."""
    lines = [
        (
            "| model | method | task | questions (prompts) | accuracy [95% CI] | middle | edges | Δ [95% CI] "
            "| p (Holm) | verdict | Δ middle [95% CI] | p (Holm) | middle verdict |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, directory in eval_dirs.items():
        for task, results in json.loads((directory / "summary.json").read_text())["results"].items():
            labels = short_labels(list(results))
            for method, r in results.items():
                vs = r.get("vs_baseline")
                middle = (vs or {}).get("middle")
                lines.append(
                    f"| {model} | {labels[method]} | {task} | {r['n_examples']} ({r['n']}) | "
                    f"{interval_cell(r['accuracy'], r['accuracy_ci'])} | "
                    f"{interval_cell(r['middle_accuracy'], r['middle_accuracy_ci'])} | "
                    f"{interval_cell(r['edges_accuracy'], r['edges_accuracy_ci'])} | {delta_cell(vs)} | "
                    f"{p_cell(vs, 'p_holm')} | {comparison_verdict(vs) or 'baseline'} | {delta_cell(middle)} | "
                    f"{p_cell(middle, 'p_holm')} | {comparison_verdict(middle) or '–'} |"
                )
    return lines


def tiny_report_parts(
    out, args, eval_dirs, scale_file, positions_plot, repo_positions, history: dict | None = None
) -> tuple[str, list[str], list[str]]:
    """Intro, outputs and closing of the built-in loop's report: what the tiny models are and are not evidence of."""
    stem = scale_file.with_suffix("")
    positions = ", ".join(map(str, recipe.eval_positions(args)))
    comparisons = continued_comparisons(eval_dirs)
    data = (
        f"KV streams of {args.pairs} pairs from {args.distinct_keys} keys, the gold pair in the first or last "
        f"{args.edge_width}"
    )
    total = args.steps + (history["steps"] if history else 0)
    if history:
        continued = (
            f"It was also continued with RoPE and with REPO on the same data ({data}): the shipped pair "
            f"`{history['name']}` (scripts/make_tiny_repo_pair.py: {history['steps']} steps each, REPO's predictors "
            f"from the paper's initialisation, handed over from RoPE positions over the first "
            f"{history['curriculum_steps']}), then {args.steps} more steps here on fresh streams: `rope` and `repo`, "
            f"{total} steps each, still far from the paper's continual pre-training (50B tokens)."
        )
    else:
        continued = (
            f"It was also continued for {args.steps} steps with RoPE and with REPO on the same data ({data}): `rope` "
            f"and `repo`; REPO's predictors start fresh, and {args.steps} steps are far from the paper's continual "
            "pre-training."
        )
    intro = (
        f"The tiny base `{Path(args.base).name}` is a 4-layer RoPE OLMo-2 (byte tokenizer) that retrieves a key's "
        f"value at the edges of a {args.pairs}-pair context and loses the middle (scripts/make_tiny_dip_base.py). "
        "The training-free methods act on it: LPES searched on it, then every method evaluated on held-out prompts "
        f"(seed {recipe.EVAL_SEED}) with the gold pair at positions {positions}, {args.eval_examples} questions each "
        f"(Found in the Middle, which calibrates with one extra prefill per pair, on {args.fim_examples} with their "
        f"own baseline: `base-fim`). {continued} Middle: the positions between the first and the last; Δ: paired "
        "difference with the same model's baseline, 95% CI by question, two-sided sign-flip p with Holm's adjustment "
        "over the methods (docs/evaluation.md#statistics); a verdict needs both. A tiny model on a short context: it "
        "shows what each method does to a measured dip, not how it does on an LLM (docs/reproductions.md)."
        f"\n\n{repo_positions_sentence(repo_positions, total)} {continued_sentence(comparisons)}"
    )
    outputs = [
        f"## The continued models against the base they came from ({total} steps each, same data)",
        "",
        (
            "Their baselines paired with the base's baseline on the same prompts (Δ, 95% CI by question, "
            "sign-flip p, Holm over the two models):"
        ),
        "",
        *continued_against_base(comparisons),
        "",
        f"- Base model, every method: [report]({(eval_dirs['base'] / 'report.md').relative_to(out)})",
        f"- Base model, Found in the Middle: [report]({(eval_dirs['base-fim'] / 'report.md').relative_to(out)})",
        (
            f"- RoPE- and REPO-continued models: [report]({(eval_dirs['rope'] / 'report.md').relative_to(out)}), "
            f"[report]({(eval_dirs['repo'] / 'report.md').relative_to(out)})"
        ),
        (
            f"- LPES scale file: `{scale_file.relative_to(out)}`; curve and fitness plots next to it "
            f"(`{stem.name}.curve.png`, `{stem.name}.fitness.png`)"
        ),
        f"- REPO positions per head: `{positions_plot.relative_to(out)}`",
        "- Checkpoints: `runs/<method>/` (Lightning), `models/<method>/` (HF, with tokenizer)",
    ]
    closing = [
        "## The same at full scale",
        "",
        (
            "The same loop on OLMo-2 1B (train with launchers, export, search, evaluate every method on the "
            "questions after the search's): the dry run writes every command to `outputs/quickstart-olmo2-1b/"
            "commands.sh`, runs nothing and says what a real run here would lack (the base checkpoint, the data); "
            "that file runs as written once they are in place (docs/training.md)."
        ),
        "",
        "```bash",
        "python -m workflows quickstart --config configs/quickstart/olmo2-1b.yaml --dry_run   # every command, run none",
        "python -m workflows quickstart --config configs/quickstart/olmo2-1b.yaml             # run them (GPU node)",
        "```",
    ]
    return intro, outputs, closing


def config_report_parts(out, args, config, eval_dirs, scale_file, models) -> tuple[str, list[str], list[str]]:
    """Intro, outputs and closing of a config run's report: what was run, from which files."""
    stem = scale_file.with_suffix("")
    trained = ", ".join(f"{name} (`{path}`)" for name, path in config.train.methods.items())
    shown = {"out": str(out), "base": config.base, "python": "python"}
    launcher = " ".join(loop_config.fill(arg, shown) for arg in config.train.launcher)
    intro = (
        f"The loop of `{args.config_name}`: the base `{config.base}` continued as {trained} through "
        f"`{launcher}`, LPES searched on the {config.search.model} model "
        f"(`{config.search.config}`), each model evaluated with its `evaluate.methods`. Data, budgets and seeds "
        "are those of the config and the files it names (exact commands: `commands.sh`); the per-position "
        "numbers and the paired comparisons with `baseline` are in each `summary.json`."
    )
    outputs = [f"- {name} model: [report]({(d / 'report.md').relative_to(out)})" for name, d in eval_dirs.items()]
    outputs.append(
        f"- LPES scale file: `{scale_file.relative_to(out)}`; curve and fitness plots next to it "
        f"(`{stem.name}.curve.png`, `{stem.name}.fitness.png`)"
    )
    for name in config.train.methods:
        if json.loads((Path(models[name]) / "config.json").read_text()).get("position_method") == "repo":
            outputs.append(
                f"- REPO positions per head of `{name}`: not plotted here; on the prompts of a task: "
                f"`python scripts/analyze_repo_positions.py --model {models[name]} --task kv "
                f"--out {out / 'repo-positions' / name}` (its settings with `--task_param KEY=VALUE`)"
            )
    outputs.append("- Checkpoints: `runs/<method>/` (Lightning), `models/<method>/` (HF, with tokenizer)")
    closing = [
        "## Rerun",
        "",
        "```bash",
        f"python -m workflows quickstart --config {args.config_name} --out {out}",
        "```",
    ]
    return intro, outputs, closing


def write_report(out, run, eval_dirs, seconds, intro, outputs, closing) -> None:
    """OUT/README.md: the results table, the outputs, the plots, each step's time; mode-specific text around it."""
    plots = sorted(p.relative_to(out) for p in out.rglob("*.png"))
    text = [
        "# repo-train quickstart report",
        "",
        f"Built in {seconds / 60:.1f} min on this machine. {intro}",
        "",
        "## Results (accuracy by gold position: see the plots)",
        "",
        *results_table(eval_dirs),
        "",
        *outputs,
        "",
        "Plots: " + ", ".join(f"`{p}`" for p in plots),
        "",
        "## Steps and times",
        "",
        *(f"- {title}: {secs:.0f} s" for title, secs in run.timings),
        "",
        "Every command is in `commands.sh`, in order.",
        "",
        *closing,
    ]
    (out / "README.md").write_text("\n".join(text) + "\n")
