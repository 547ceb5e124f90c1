"""`python -m workflows reproduce-position-bias`: LPES and the calibrators on a tiny RoPE model that has lost
the middle, CPU only.

    python -m workflows reproduce-position-bias [--out outputs/position-bias] [--seeds 3]

The built-in base (workflows/assets/tiny-kv-base, a 4-layer RoPE OLMo-2 that
retrieves perfectly in contexts of up to 24 pairs) has no position bias of its
own. Per seed, this command gives it one, the way lost-in-the-middle is thought to
arise in LLMs (the relevant text of training documents sits near their start or
end), then tries to repair it:

1. continual training with the real Lightning path on long key-value streams
   (64 pairs from 8 repeating keys, 193 tokens, 2.7x the base's longest
   training sequence) whose gold pair is always in the first or last 4 pairs;
   export to HF;
2. an LPES search with the paper's genetic algorithm (Table 9: population 32,
   20 generations; cubic Bezier curve) on a search set (seed 2000, gold at
   the beginning, middle and end);
3. the harness on held-out prompts (seed 3000, gold at 8 positions) with
   baseline, LPES, PI at the LPES mean scale, CALIOPE (hourglass, moses),
   Found in the Middle and PCD; the base model too, once.

Then mean +- sample std over seeds of the accuracy overall, in the middle
(gold outside the trained edges) and at the edges, and of rho (the U-shape
index), per position too: OUT/results.json, OUT/results.md,
OUT/accuracy_by_position.png. A step whose output exists is skipped, so an
interrupted run resumes by rerunning the same command. Every command is
appended to OUT/commands.sh; each one's output goes to OUT/logs/.
Docs: docs/reproductions.md.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from jsonargparse import Namespace

from evaluation.results import load_summary, write_json_atomic
from repo_common.atomic import write_text_atomic
from repo_common.config_cli import ConfigParser, config_values, dataclass_config, dump_config
from workflows import position_bias as recipe
from workflows.commands import CommandRunner, project_root
from workflows.position_bias_results import PAPER_CLAIMS, aggregate, plot, position_stats, results_markdown

FORMAT_VERSION = 1


def add_arguments(parser: ConfigParser) -> None:
    """The recipe's options (`position_bias.PositionBias`), with this command's description as its --help."""
    parser.description = __doc__
    recipe.add_arguments(parser)


def run(options: Namespace, parser: ConfigParser) -> int:
    """The options judged by `PositionBias` (a mistake: one line, exit code 2), then every seed and the aggregate."""
    reproduce(dataclass_config(options, recipe.PositionBias))
    return 0


def run_seed(seed: int, out: Path, run: CommandRunner, args: recipe.PositionBias) -> dict:
    """Train, search, evaluate one seed (each step skipped when its output exists); its scales and eval dir."""
    model = recipe.train_model(seed, out, run, args)
    scale_file = out / "scales" / f"seed{seed}.json"
    if not scale_file.is_file():
        run(
            f"seed {seed}: LPES search",
            "search",
            "run",
            "--model.path",
            str(model),
            "--config",
            str(recipe.search_config(out, args)),
            "--out",
            str(scale_file),
            "--resume",
            log=out / "logs" / f"search-seed{seed}.log",
        )
    scales = [float(s) for s in json.loads(scale_file.read_text())["scales"]]
    mean_scale = f"{statistics.fmean(scales):.4g}"
    eval_dir = out / "eval" / f"seed{seed}"
    if not _has_every_method(eval_dir):  # the harness adds missing methods to a run and keeps the others
        methods = [flag.format(scale_file=scale_file, mean_scale=mean_scale) for _, flag in recipe.METHODS]
        run(
            f"seed {seed}: evaluate every method",
            *recipe.eval_command(model, eval_dir, methods, args),
            log=out / "logs" / f"eval-seed{seed}.log",
        )
    return {"scales": scales, "mean_scale": float(mean_scale), "eval_dir": eval_dir}


def _has_every_method(eval_dir: Path) -> bool:
    if not (eval_dir / "summary.json").is_file():
        return False
    try:
        recipe.method_results(load_summary(eval_dir / "summary.json"))
    except ValueError:
        return False
    return True


def reproduce(args: recipe.PositionBias) -> None:
    """The base model's baseline once, every seed, then results.json, results.md and the plot."""
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", dump_config(config_values(args)))  # --config replays it
    run = CommandRunner(
        out,
        description=f"Commands of {recipe.PROG}, in order.",
        cwd=project_root(),
        fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)},
    )
    edges = recipe.edge_positions(args)
    base_dir = out / "eval" / "base"
    if not (base_dir / "summary.json").is_file():
        run(
            "base model: baseline",
            *recipe.eval_command(Path(args.base), base_dir, ["baseline"], args),
            log=out / "logs" / "eval-base.log",
        )
    base = position_stats(load_summary(base_dir / "summary.json")["results"]["kv"]["baseline"], edges)
    per_seed, scales = {}, {}
    for seed in range(args.seeds):
        outcome = run_seed(seed, out, run, args)
        summary = load_summary(outcome["eval_dir"] / "summary.json")
        per_seed[seed] = {name: position_stats(r, edges) for name, r in recipe.method_results(summary).items()}
        scales[seed] = {"scales": outcome["scales"], "mean": outcome["mean_scale"]}
        line = ", ".join(f"{name} {s['accuracy']:.3f} (middle {s['middle']:.3f})" for name, s in per_seed[seed].items())
        print(f"seed {seed}: {line}", flush=True)
    settings = {key: value for key, value in config_values(args).items() if key != "out"}
    results = {
        "format_version": FORMAT_VERSION,
        "settings": {**settings, "edges": edges, "eval_positions": recipe.eval_positions(args)},
        "seeds": list(range(args.seeds)),
        "base": base,
        "methods": aggregate(per_seed),
        "scales": scales,
        "paper_claims": PAPER_CLAIMS,
    }
    write_json_atomic(out / "results.json", results)
    write_text_atomic(out / "results.md", results_markdown(results))
    plot(results, out / "accuracy_by_position.png")
    print(f"\nwrote {out / 'results.md'}, {out / 'results.json'}, {out / 'accuracy_by_position.png'}")
