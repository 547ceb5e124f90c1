#!/usr/bin/env python
"""LPES and the calibrators on a tiny RoPE model that has lost the middle, CPU only.

    python scripts/reproduce_position_bias.py [--out outputs/position-bias] [--seeds 3]

The built-in base (assets/tiny-kv-base, a 4-layer RoPE OLMo-2 that retrieves
perfectly in contexts of up to 24 pairs) has no position bias of its own. Per
seed, this script gives it one, the way lost-in-the-middle is thought to arise
in LLMs (the relevant text of training documents sits near their start or
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

import argparse
import json
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from evaluation.results import load_summary, write_json_atomic
from evaluation.statistics import mean_std_over_seeds
from repo_common.atomic import save_figure_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, dump_config, parse_script, script_config
from workflows.commands import CommandRunner, cpu_trainer_section, last_checkpoint

FORMAT_VERSION = 1
BASE = ROOT / "assets" / "tiny-kv-base"
SEARCH_SEED, EVAL_SEED = 2000, 3000
#: (short name, --method flag template); {scale_file} and {mean_scale} are filled per seed.
METHODS = (
    ("baseline", "baseline"),
    ("lpes", "lpes:scale_file={scale_file}"),
    ("pi (LPES mean)", "pi:scale={mean_scale}"),
    ("caliope hourglass", "caliope:calibrator=hourglass,delta_min=5,delta_max=1000"),
    ("caliope moses", "caliope:calibrator=moses,delta_gap=10000"),
    # CALIOPE's published gaps add thousands of positions, far past the 200 this model was trained on; these
    # keep the added positions inside that range (chosen by that rule before any result, not tuned on them).
    ("caliope hourglass, small gaps", "caliope:calibrator=hourglass,delta_min=0,delta_max=0.25"),
    ("caliope moses, small gap", "caliope:calibrator=moses,delta_gap=4"),
    ("found in the middle", "fim:dummy=blank"),
    ("pcd", "pcd"),
)
PAPER_CLAIMS = {
    "lpes": "LPES: up to +11.2% on KV retrieval, mostly from the middle positions, over the unscaled model and "
    "ahead of uniform scaling (PI).",
    "calibrators": "CALIOPE, Found in the Middle and PCD: higher accuracy for middle positions of RoPE LLMs, "
    "flattening the U-shape.",
}


PROG = "scripts/reproduce_position_bias.py"


def build_parser() -> ConfigParser:
    """The recipe's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--out", type=str, default="outputs/position-bias", help="output directory (created; resumes)")
    parser.add_argument("--base", type=str, default=str(BASE), help="RoPE HF model to continue (default: the built-in)")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds (0, 1, ...)")
    parser.add_argument("--steps", type=int, default=400, help="continual-training steps per seed")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (linear decay to 0)")
    parser.add_argument("--pairs", type=int, default=64, help="pairs per prompt (training and evaluation)")
    parser.add_argument(
        "--distinct_keys", "--distinct-keys", type=int, default=8, help="distinct keys per prompt (the rest repeat)"
    )
    parser.add_argument(
        "--edge_width", "--edge-width", type=int, default=4, help="training gold in the first/last this many pairs"
    )
    parser.add_argument(
        "--edge_share",
        "--edge-share",
        type=float,
        default=1.0,
        help="share of training examples with the gold at an edge",
    )
    parser.add_argument(
        "--eval_positions", "--eval-positions", type=int, default=8, help="evenly spaced gold positions evaluated"
    )
    parser.add_argument(
        "--eval_examples", "--eval-examples", type=int, default=50, help="held-out examples per gold position"
    )
    parser.add_argument(
        "--search_examples", "--search-examples", type=int, default=32, help="search examples per subset (x3 prompts)"
    )
    parser.add_argument("--generations", type=int, default=20, help="LPES breeding rounds (paper: 20)")
    parser.add_argument("--population", type=int, default=32, help="LPES population (paper: 32 = 12 + 4 + 16)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per command (OMP_NUM_THREADS)")
    return parser


def check_options(args: argparse.Namespace) -> None:
    """The recipe's domain checks (jsonargparse checked the types), each a ValueError naming the option."""
    for name in ("seeds", "steps", "pairs", "eval_examples", "search_examples", "threads", "population"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.generations < 0:
        raise ValueError("--generations must be >= 0")
    if not 2 <= args.distinct_keys <= min(8, args.pairs):
        raise ValueError(f"--distinct-keys must be in [2, {min(8, args.pairs)}] (one-character keys give 8)")
    if not 1 <= args.edge_width or 2 * args.edge_width >= args.pairs:
        raise ValueError(f"--edge-width must be >= 1 and leave middle positions: 2 x {args.edge_width} < {args.pairs}")
    if not 0.0 <= args.edge_share <= 1.0:
        raise ValueError(f"--edge-share must be in [0, 1], got {args.edge_share}")
    if not 3 <= args.eval_positions <= args.pairs:
        raise ValueError("--eval-positions must be in [3, --pairs]")
    if args.population < 4:
        raise ValueError("--population must be >= 4 (parents, crossover and mutation offspring)")
    if not (Path(args.base) / "config.json").is_file():
        raise ValueError(f"--base {args.base!r} is not an HF model directory (make one: scripts/pretrain_tiny_base.py)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv, check_options)


# ------------------------------------------------------------------ positions, data, configs
def edge_positions(args: argparse.Namespace) -> list[int]:
    """The gold positions of the training data's edges: the first and last `edge_width` pairs."""
    return [*range(args.edge_width), *range(args.pairs - args.edge_width, args.pairs)]


def eval_positions(args: argparse.Namespace) -> list[int]:
    """`eval_positions` evenly spaced gold positions from the first pair to the last."""
    n, last = args.eval_positions, args.pairs - 1
    return sorted({round(i * last / (n - 1)) for i in range(n)})


def kv_params(args: argparse.Namespace) -> dict:
    return {"num_keys": args.pairs, "distinct_keys": args.distinct_keys, "key_chars": 1, "template": "pairs"}


def write_training_data(path: Path, seed: int, args: argparse.Namespace) -> dict[str, int]:
    """Prompt/completion lines (loss on the value), the gold pair at an edge with probability edge_share."""
    from evaluation.tasks import build_task
    from evaluation.tasks.kv_retrieval import build_pairs_prompt, move_pair, pairs_form

    task = build_task("kv", **kv_params(args), num_examples=args.steps * 32, seed=1000 + seed, gold_positions=[0])
    rng = random.Random(seed)
    edges = edge_positions(args)
    middle = [k for k in range(args.pairs) if k not in edges]
    lines, at_edge = [], 0
    for pairs, source in task.examples():
        pairs = pairs_form(pairs)
        key, value = pairs[source]
        on_edge = rng.random() < args.edge_share
        target = rng.choice(edges if on_edge else middle)
        at_edge += on_edge
        prompt, _ = build_pairs_prompt(move_pair(pairs, source, target), key)
        lines.append(json.dumps({"prompt": prompt, "completion": value}))
    write_text_atomic(path, "\n".join(lines) + "\n")
    return {"examples": len(lines), "gold_at_edge": at_edge}


def training_config(out: Path, seed: int, data: Path, args: argparse.Namespace) -> Path:
    config = {
        "seed_everything": seed,
        "trainer": cpu_trainer_section(
            args.steps, out / "runs" / f"seed{seed}", log_every_n_steps=25, enable_progress_bar=False
        ),
        "model": {"init_from": str(args.base), "position": "rope", "lr": args.lr, "warmup_steps": 20},
        "data": {
            "train": {
                "class_path": "repo_train.data.PromptCompletionData",
                "init_args": {
                    "paths": [str(data)],
                    "tokenizer": str(args.base),
                    "seq_len": 3 * args.pairs + 8,
                    "seed": seed,
                },
            },
            "global_batch_size": 32,
            "micro_batch_size": 32,
        },
        "checkpoint": {"every_n_train_steps": args.steps},
    }
    path = out / "configs" / f"train-seed{seed}.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def search_config(out: Path, args: argparse.Namespace) -> Path:
    """The paper's GA (Table 9 proportions) on this task; held-out evaluation is done by the harness afterwards."""
    parents = max(2, round(args.population * 12 / 32))
    crossover = max(1, round(args.population * 4 / 32))
    config = {
        "task": {"name": "kv", "num_items": args.pairs, "num_examples": args.search_examples, "seed": SEARCH_SEED,
                 "max_new_tokens": 1, "batch_size": 48, "key_chars": 1, "template": "pairs",
                 "distinct_keys": args.distinct_keys},
        "space": {"num_points": 4},
        "ga": {"population": args.population, "parents": parents, "crossover_offspring": crossover,
               "mutation_offspring": args.population - parents - crossover, "generations": args.generations},
        "held_out": {"num_examples": 0},
    }  # fmt: skip
    path = out / "configs" / "search.yaml"
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def eval_command(model: Path, out: Path, methods: Sequence[str], args: argparse.Namespace) -> list[str]:
    params = [
        p for key, value in kv_params(args).items() if key != "num_keys" for p in ("--task-param", f"kv:{key}={value}")
    ]
    return [
        "evaluation", "run", "--model", str(model), "--tasks", "kv", "--num-keys", str(args.pairs), *params,
        "--num-examples", str(args.eval_examples), "--seed", str(EVAL_SEED),
        "--gold-positions", ",".join(map(str, eval_positions(args))), "--batch-size", "50", "--no-progress",
        *(flag for method in methods for flag in ("--method", method)), "--out", str(out),
    ]  # fmt: skip


# ------------------------------------------------------------------ one seed
def train_model(seed: int, out: Path, run: CommandRunner, args: argparse.Namespace) -> Path:
    """Continue the base on edge-gold data and export it: OUT/models/seedN (skipped when it exists).

    Also the recipe of the shipped dip model (scripts/make_tiny_dip_base.py), so both make the same model.
    """
    model = out / "models" / f"seed{seed}"
    if not (model / "config.json").is_file():
        data = out / "data" / f"train-seed{seed}.jsonl"
        counts = write_training_data(data, seed, args)
        print(f"seed {seed}: {counts['examples']} training examples, {counts['gold_at_edge']} with the gold at an edge")
        config = training_config(out, seed, data, args)
        run(f"seed {seed}: continual training", "repo_train", "fit", "--config", str(config),
            log=out / "logs" / f"train-seed{seed}.log")  # fmt: skip
        checkpoint = last_checkpoint(out / "runs" / f"seed{seed}")
        run(f"seed {seed}: export", "repo_train", "export", "--checkpoint", str(checkpoint), "--out", str(model),
            "--tokenizer", str(args.base), log=out / "logs" / f"export-seed{seed}.log")  # fmt: skip
    return model


def run_seed(seed: int, out: Path, run: CommandRunner, args: argparse.Namespace) -> dict:
    """Train, search, evaluate one seed (each step skipped when its output exists); its scales and eval dir."""
    model = train_model(seed, out, run, args)
    scale_file = out / "scales" / f"seed{seed}.json"
    if not scale_file.is_file():
        run(f"seed {seed}: LPES search", "search", "run", "--model", str(model), "--config",
            str(search_config(out, args)), "--out", str(scale_file), "--resume",
            log=out / "logs" / f"search-seed{seed}.log")  # fmt: skip
    scales = [float(s) for s in json.loads(scale_file.read_text())["scales"]]
    mean_scale = f"{statistics.fmean(scales):.4g}"
    eval_dir = out / "eval" / f"seed{seed}"
    if not _has_every_method(eval_dir):  # the harness adds missing methods to a run and keeps the others
        methods = [flag.format(scale_file=scale_file, mean_scale=mean_scale) for _, flag in METHODS]
        run(f"seed {seed}: evaluate every method", *eval_command(model, eval_dir, methods, args),
            log=out / "logs" / f"eval-seed{seed}.log")  # fmt: skip
    return {"scales": scales, "mean_scale": float(mean_scale), "eval_dir": eval_dir}


def _has_every_method(eval_dir: Path) -> bool:
    if not (eval_dir / "summary.json").is_file():
        return False
    try:
        method_results(load_summary(eval_dir / "summary.json"))
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ aggregation
def method_results(summary: Mapping, methods: Sequence[tuple[str, str]] = METHODS) -> dict[str, dict]:
    """Short method name -> its kv result, matching each harness label to the `methods` flag it came from."""
    results = summary["results"]["kv"]
    out = {}
    for name, flag in methods:
        matches = [label for label in results if _label_matches(label, flag)]
        if len(matches) != 1:
            raise ValueError(f"method {name!r}: expected one result labelled like {flag!r}, found {matches}")
        out[name] = results[matches[0]]
    return out


def _label_matches(label: str, flag: str) -> bool:
    """Same method, and every setting of the flag in the label (the harness adds the defaults, in its own order).

    A setting whose value is a placeholder ({scale_file}) only has to be present.
    """

    def parse(text: str) -> tuple[str, dict[str, str]]:
        name, _, params = text.partition(":")
        return name, dict(item.split("=", 1) for item in params.split(",") if item)

    name, wanted = parse(flag)
    label_name, given = parse(label)
    return name == label_name and all(k in given and ("{" in v or given[k] == v) for k, v in wanted.items())


def position_stats(result: Mapping, edges: Sequence[int]) -> dict:
    """Accuracy overall, at the trained edges, in the middle, rho, and per position, from one harness result."""
    by_position = {int(p): float(cell["accuracy"]) for p, cell in result["by_position"].items()}
    middle = [a for p, a in by_position.items() if p not in edges]
    at_edges = [a for p, a in by_position.items() if p in edges]
    paired = result.get("vs_baseline")  # the harness's paired comparison with the baseline on the same prompts
    return {
        "accuracy": float(result["accuracy"]),
        "delta": None if not paired else float(paired["mean_diff"]),
        "delta_p": None if not paired else float(paired["p_value"]),
        "middle": statistics.fmean(middle) if middle else None,
        "edges": statistics.fmean(at_edges) if at_edges else None,
        "rho": result["rho"],
        "by_position": by_position,
    }


def aggregate(per_seed: Mapping[int, Mapping[str, Mapping]]) -> dict[str, dict]:
    """seed -> method -> position_stats  =>  method -> mean and std over seeds of each number."""

    def over_seeds(values):
        values = [v for v in values if v is not None]
        if not values:
            return None
        stats = mean_std_over_seeds(values)
        return {"mean": stats.mean, "std": stats.std if len(values) > 1 else None}  # no spread from one seed

    seeds = sorted(per_seed)
    methods = list(per_seed[seeds[0]])
    out = {}
    for method in methods:
        rows = [per_seed[s][method] for s in seeds]
        positions = sorted(rows[0]["by_position"])
        out[method] = {
            **{key: over_seeds([r[key] for r in rows]) for key in ("accuracy", "delta", "middle", "edges", "rho")},
            "delta_p_by_seed": {s: per_seed[s][method]["delta_p"] for s in seeds},
            "by_position": {p: over_seeds([r["by_position"][p] for r in rows]) for p in positions},
            "by_seed": {s: per_seed[s][method]["accuracy"] for s in seeds},
        }
    return out


def _cell(stats: Mapping | None, digits: int = 3) -> str:
    if stats is None:
        return "n/a"
    spread = "" if stats["std"] is None else f" ± {stats['std']:.{digits}f}"
    return f"{stats['mean']:.{digits}f}{spread}"


def results_markdown(results: Mapping) -> str:
    settings, methods, base = results["settings"], results["methods"], results["base"]
    positions = sorted(next(iter(methods.values()))["by_position"])
    lines = [
        "# LPES and the calibrators on a tiny RoPE model that lost the middle",
        "",
        (
            f"Mean ± sample std over {len(results['seeds'])} seed(s); held-out: {settings['eval_examples']} examples "
            f"× {len(positions)} gold positions of {settings['pairs']} pairs ({settings['distinct_keys']} distinct "
            f"keys). Training gold: the first/last {settings['edge_width']} pairs ({settings['edge_share']:.0%} of "
            "examples). 'middle' = evaluated positions outside those edges."
        ),
        "",
        "| method | accuracy | Δ vs baseline | middle | edges | ρ |",
        "|---|---|---|---|---|---|",
        (
            f"| base model (before) | {base['accuracy']:.3f} | | {_fmt(base['middle'])} | {_fmt(base['edges'])} "
            f"| {_fmt(base['rho'], 1)} |"
        ),
    ]
    for name, m in methods.items():
        lines.append(
            f"| {name} | {_cell(m['accuracy'])} | {_cell(m['delta'])} | {_cell(m['middle'])} | {_cell(m['edges'])} "
            f"| {_cell(m['rho'], 1)} |"
        )
    lines += [
        "",
        "Δ vs baseline: the harness's paired difference on the same prompts (mean over seeds); two-sided p per "
        "seed (paired sign-flip test on per-question mean differences): "
        + "; ".join(
            f"{name} " + ", ".join(_fmt(p) for p in m["delta_p_by_seed"].values())
            for name, m in methods.items()
            if any(p is not None for p in m["delta_p_by_seed"].values())
        )
        + ".",
        "",
        "## Accuracy by gold position (mean over seeds)",
        "",
    ]
    lines += ["| method | " + " | ".join(str(p) for p in positions) + " |", "|---|" + "---|" * len(positions)]
    lines.append("| base model | " + " | ".join(f"{base['by_position'][p]:.2f}" for p in positions) + " |")
    for name, m in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{m['by_position'][p]['mean']:.2f}" for p in positions) + " |")
    lines += ["", "## LPES scales per seed (layers 0 to L-1)", ""]
    for seed, record in results["scales"].items():
        lines.append(f"- seed {seed}: {', '.join(f'{s:.2f}' for s in record['scales'])} (mean {record['mean']:.3f})")
    lines += [
        "",
        "## Per seed (accuracy)",
        "",
        "| method | " + " | ".join(f"seed {s}" for s in results["seeds"]) + " |",
    ]
    lines.append("|---|" + "---|" * len(results["seeds"]))
    for name, m in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{m['by_seed'][s]:.3f}" for s in results["seeds"]) + " |")
    lines += ["", "## Paper claims", "", *(f"- {claim}" for claim in PAPER_CLAIMS.values()), ""]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def plot(results: Mapping, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5.5))
    base = results["base"]["by_position"]
    axis.plot(sorted(base), [base[p] for p in sorted(base)], "k:", marker=".", label="base model (before)")
    for name, m in results["methods"].items():
        positions = sorted(m["by_position"])
        means = [m["by_position"][p]["mean"] for p in positions]
        stds = [m["by_position"][p]["std"] or 0.0 for p in positions]
        axis.errorbar(positions, means, yerr=stds, marker="o", capsize=3, label=name)
    edge_width, pairs = results["settings"]["edge_width"], results["settings"]["pairs"]
    for low, high in ((0, edge_width - 1), (pairs - edge_width, pairs - 1)):
        axis.axvspan(low - 0.5, high + 0.5, color="grey", alpha=0.15)
    axis.set_xlabel("gold pair position (shaded: where training put the gold)")
    axis.set_ylabel("accuracy")
    axis.set_ylim(-0.02, 1.02)
    axis.set_title(f"Tiny RoPE model trained with edge-only gold, {len(results['seeds'])} seed(s)")
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)  # below
    figure.tight_layout()
    save_figure_atomic(figure, path)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "config.yaml", dump_config(script_config(build_parser(), args)))  # --config replays it
    run = CommandRunner(
        out, description="Commands of scripts/reproduce_position_bias.py, in order.", cwd=ROOT, fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)},
    )  # fmt: skip
    edges = edge_positions(args)
    base_dir = out / "eval" / "base"
    if not (base_dir / "summary.json").is_file():
        run("base model: baseline", *eval_command(Path(args.base), base_dir, ["baseline"], args),
            log=out / "logs" / "eval-base.log")  # fmt: skip
    base = position_stats(load_summary(base_dir / "summary.json")["results"]["kv"]["baseline"], edges)
    per_seed, scales = {}, {}
    for seed in range(args.seeds):
        outcome = run_seed(seed, out, run, args)
        summary = load_summary(outcome["eval_dir"] / "summary.json")
        per_seed[seed] = {name: position_stats(r, edges) for name, r in method_results(summary).items()}
        scales[seed] = {"scales": outcome["scales"], "mean": outcome["mean_scale"]}
        line = ", ".join(f"{name} {s['accuracy']:.3f} (middle {s['middle']:.3f})" for name, s in per_seed[seed].items())
        print(f"seed {seed}: {line}", flush=True)
    settings = {key: value for key, value in vars(args).items() if key != "out"}
    results = {
        "format_version": FORMAT_VERSION,
        "settings": {**settings, "edges": edges, "eval_positions": eval_positions(args)},
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


if __name__ == "__main__":
    main()
