#!/usr/bin/env python
"""The whole loop on the built-in default, CPU only: train, search, calibrate, evaluate, report.

    python scripts/quickstart.py [--out outputs/quickstart] [--steps 1000]

1. continual-trains the built-in tiny base (assets/tiny-kv-base: a 4-layer
   RoPE OLMo-2 that already retrieves, made by scripts/pretrain_tiny_base.py)
   twice, with RoPE and with REPO (same data and steps), with the real
   Lightning path, on KV retrieval in the harness's "pairs" format (answer-only
   loss), and exports both as HF directories. REPO starts from the base's
   RoPE positions and hands over to its learned positions along a curriculum,
   as the paper continues OLMo-2;
2. runs an LPES search on the RoPE model and writes a scale file;
3. evaluates baseline, LPES (and PI at the mean scale), CALIOPE, Found in the
   Middle and PCD on the RoPE model, and the REPO model's baseline, with the
   gold pair at every position;
4. writes one report directory: README.md (summary, commands), the plots,
   the scale file, the checkpoints.

Every step is one of the project's commands, run as a subprocess and
written into OUT/commands.sh, so each can be rerun alone or at full scale.
The script holds run constants only; the work is in the packages.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import yaml

from repo_train.commands import CommandRunner, cpu_trainer_section

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "assets" / "tiny-kv-base"
KV_SEED_TRAIN, KV_SEED_SEARCH, KV_SEED_EVAL = 1000, 2000, 3000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/quickstart", help="report directory (created)")
    parser.add_argument("--base", default=str(BASE), help="HF directory to continue from (default: the built-in)")
    parser.add_argument("--steps", type=int, default=1000, help="continual-training steps per model")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of the continual training")
    parser.add_argument("--num-keys", type=int, default=8, help="KV pairs per prompt (positions evaluated)")
    parser.add_argument("--key-chars", type=int, default=1, help="characters per key and value")
    parser.add_argument("--train-examples", type=int, default=4000)
    parser.add_argument("--eval-examples", type=int, default=40, help="examples per gold position")
    parser.add_argument("--generations", type=int, default=2, help="LPES breeding rounds")
    parser.add_argument(
        "--edge-share",
        type=float,
        default=None,
        help="train with this share of gold pairs in the first and last two positions (e.g. 0.95) instead of "
        "uniform: gives the model a position bias to correct (docs/reproductions.md)",
    )
    return parser.parse_args()


def kv_params(args: argparse.Namespace, **more) -> dict:
    """The harness's KV task in the base's format: generated short keys, "pairs" template."""
    return dict(num_keys=args.num_keys, key_chars=args.key_chars, template="pairs", **more)


def write_training_data(out: Path, args: argparse.Namespace) -> Path:
    """Prompt/completion lines (loss on the value only), one random gold position per example."""
    from evaluation.tasks import build_task

    params = kv_params(args, num_examples=args.train_examples, gold_positions="all", seed=KV_SEED_TRAIN)
    rng = random.Random(0)
    by_example: dict[str, list[dict]] = {}
    for row in build_task("kv", **params).rows():
        by_example.setdefault(row["example_id"], []).append(row)
    data = out / "data" / "kv-train.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    with data.open("w") as handle:
        for rows in by_example.values():
            row = rows[gold_position(rng, len(rows), args.edge_share)]
            handle.write(json.dumps({"prompt": row["prompt"], "completion": row["value"]}) + "\n")
    return data


def gold_position(rng: random.Random, num_keys: int, edge_share: float | None) -> int:
    """Uniform, or with `edge_share` of the mass on the first and last two positions (the rest uniform)."""
    if edge_share is None or num_keys <= 4:
        return rng.randrange(num_keys)
    if not 0.0 <= edge_share <= 1.0:
        raise SystemExit(f"--edge-share must be in [0, 1], got {edge_share}")
    edges = [0, 1, num_keys - 2, num_keys - 1]
    if rng.random() < edge_share:
        return rng.choice(edges)
    return rng.choice([k for k in range(num_keys) if k not in edges])


def training_config(out: Path, method: str, data: Path, args: argparse.Namespace) -> Path:
    curriculum = {"repo_curriculum_start": 1.0, "repo_curriculum_steps": args.steps // 2} if method == "repo" else {}
    config = {
        "seed_everything": 42,
        "trainer": cpu_trainer_section(args.steps, out / "runs" / method, log_every_n_steps=25),
        "model": {
            "init_from": str(args.base),
            "position_method": method,
            "lr": args.lr,
            "warmup_steps": min(20, args.steps // 10),
            **curriculum,
        },
        "data": {
            "train": {
                "source": "prompt_completion",
                "paths": [str(data)],
                "tokenizer": str(args.base),
                "seq_len": 3 * args.num_keys * args.key_chars + 8,
            },
            "global_batch_size": 32,
            "micro_batch_size": 32,
        },
        "checkpoint": {"every_n_train_steps": args.steps},
    }
    path = out / "configs" / f"train-{method}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def search_config(out: Path, args: argparse.Namespace) -> Path:
    config = {
        "task": {
            "name": "kv",
            "num_items": args.num_keys,
            "num_examples": 16,
            "seed": KV_SEED_SEARCH,
            "max_new_tokens": args.key_chars,
            "batch_size": 48,
            "key_chars": args.key_chars,
            "template": "pairs",
        },
        "space": {"num_points": 3},
        "ga": {"population": 8, "parents": 4, "generations": args.generations, "mutation_offspring": 3,
               "crossover_offspring": 1},
        "held_out": {"num_examples": 16},
    }  # fmt: skip
    path = out / "configs" / "search.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def plot_repo_positions(out: Path, model_dir: Path, args: argparse.Namespace) -> Path:
    """Positions per head of the last REPO layer on one evaluation prompt (REPO paper's position figures)."""
    import torch

    from evaluation.diagnostics import plot_head_positions
    from evaluation.models import load_model
    from evaluation.tasks import build_task
    from repo_train.modeling import record_positions

    model, tokenizer = load_model(str(model_dir))
    row = next(iter(build_task("kv", **kv_params(args, num_examples=1, gold_positions=0, seed=KV_SEED_EVAL)).rows()))
    ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
    with torch.no_grad(), record_positions(model) as recorder:
        model(ids)
    last = [p for p in recorder.positions if p is not None][-1]
    path = out / "repo_positions_last_layer.png"
    plot_head_positions(last, title="REPO positions per head, last layer, one KV prompt", path=path)
    return path


def main() -> None:
    args = parse_args()
    out = (ROOT / args.out).resolve() if not Path(args.out).is_absolute() else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = CommandRunner(out, description="The commands this quickstart ran, in order.", cwd=ROOT)
    started = time.perf_counter()

    if not (Path(args.base) / "config.json").is_file():
        raise SystemExit(f"--base {args.base!r} is not an HF model directory (make one: scripts/pretrain_tiny_base.py)")
    data = write_training_data(out, args)
    models = {}
    for method in ("rope", "repo"):
        config = training_config(out, method, data, args)
        run(f"train tiny OLMo-2 with {method.upper()}", "repo_train", "fit", "--config", str(config))
        checkpoint = next((out / "runs" / method).rglob("last.ckpt"))
        models[method] = out / "models" / method
        run(f"export the {method.upper()} checkpoint", "repo_train", "export", "--checkpoint", str(checkpoint),
            "--out", str(models[method]), "--tokenizer", str(args.base))  # fmt: skip

    scale_file = out / "scales" / "rope-kv.json"
    run("LPES search on the RoPE model", "search", "run", "--model", str(models["rope"]), "--config",
        str(search_config(out, args)), "--out", str(scale_file))  # fmt: skip
    mean_scale = sum(json.loads(scale_file.read_text())["scales"]) / _num_layers(scale_file)

    common = ["--tasks", "kv", "--num-keys", str(args.num_keys), "--num-examples", str(args.eval_examples),
              "--task-param", f"kv:key_chars={args.key_chars}", "--task-param", "kv:template=pairs",
              "--seed", str(KV_SEED_EVAL), "--gold-positions", "all", "--batch-size", "64"]  # fmt: skip
    eval_dirs = {"rope": out / "eval" / "rope", "repo": out / "eval" / "repo", "base": out / "eval" / "base"}
    run("evaluate the RoPE model with every method", "evaluation", "run", "--model", str(models["rope"]), *common,
        "--method", "baseline", "--method", f"lpes:scale_file={scale_file}", "--method", f"pi:scale={mean_scale:.4g}",
        "--method", "caliope:calibrator=hourglass", "--method", "fim:dummy=blank", "--method", "pcd",
        "--out", str(eval_dirs["rope"]))  # fmt: skip
    run("evaluate the REPO model", "evaluation", "run", "--model", str(models["repo"]), *common,
        "--method", "baseline", "--out", str(eval_dirs["repo"]))  # fmt: skip
    run("evaluate the base model (before continual training)", "evaluation", "run", "--model", str(args.base),
        *common, "--method", "baseline", "--out", str(eval_dirs["base"]))  # fmt: skip
    run("one plot: RoPE methods, the REPO model and the base", "evaluation", "report", "--out",
        str(eval_dirs["rope"]), "--compare", str(eval_dirs["repo"]), "--compare", str(eval_dirs["base"]))  # fmt: skip
    positions_plot = plot_repo_positions(out, models["repo"], args)
    write_report(out, args, run, eval_dirs, scale_file, positions_plot, time.perf_counter() - started)
    print(f"\nreport: {out / 'README.md'}")


def results_table(eval_dirs: dict[str, Path]) -> list[str]:
    """Overall accuracy, CI, U-shape ρ and worst position per (model, method), from each summary.json."""
    lines = ["| model | method | n | accuracy [95% CI] | ρ | worst position (acc) |", "|---|---|---|---|---|---|"]
    for model, directory in eval_dirs.items():
        for method, r in json.loads((directory / "summary.json").read_text())["results"]["kv"].items():
            rho = "n/a" if r["rho"] is None else f"{r['rho']:.1f}"
            low, high = r["accuracy_ci"]
            lines.append(
                f"| {model} | `{method}` | {r['n']} | {r['accuracy']:.3f} [{low:.3f}, {high:.3f}] | {rho} "
                f"| {r['worst_position']} ({r['worst_accuracy']:.3f}) |"
            )
    return lines


def _num_layers(scale_file: Path) -> int:
    return int(json.loads(scale_file.read_text())["num_layers"])


def write_report(out, args, run, eval_dirs, scale_file, positions_plot, seconds) -> None:
    stem = scale_file.with_suffix("")
    plots = sorted(p.relative_to(out) for p in out.rglob("*.png"))
    text = [
        "# repo-train quickstart report",
        "",
        (
            f"Built in {seconds / 60:.1f} min on this machine. The tiny base `{Path(args.base).name}` (4-layer RoPE "
            f"OLMo-2, byte tokenizer, pre-trained to retrieve) continued for {args.steps} steps with RoPE and with "
            f"REPO on KV retrieval ({args.num_keys} pairs, {args.key_chars}-character keys, the harness's `pairs` "
            "template, loss on the answer), then evaluated with the gold pair at every position. Tiny models on a "
            "short context: read the numbers as a check that every piece runs on a model that does the task, not "
            "as evidence for or against a method at scale (docs/reproductions.md)."
        ),
        "",
        "## Results (accuracy by gold position: see the plots)",
        "",
        *results_table(eval_dirs),
        "",
        f"- RoPE model, every method: [report]({(eval_dirs['rope'] / 'report.md').relative_to(out)})",
        f"- REPO model, baseline: [report]({(eval_dirs['repo'] / 'report.md').relative_to(out)})",
        (
            f"- LPES scale file: `{scale_file.relative_to(out)}`; curve and fitness plots next to it "
            f"(`{stem.name}.curve.png`, `{stem.name}.fitness.png`)"
        ),
        f"- REPO positions per head: `{positions_plot.relative_to(out)}`",
        "- Checkpoints: `runs/<method>/` (Lightning), `models/<method>/` (HF, with tokenizer)",
        "",
        "Plots: " + ", ".join(f"`{p}`" for p in plots),
        "",
        "## Steps and times",
        "",
        *(f"- {title}: {secs:.0f} s" for title, secs in run.timings),
        "",
        "Every command is in `commands.sh`, in order.",
        "",
        "## The same at full scale",
        "",
        "```bash",
        "scripts/launch_train.sh configs/train/olmo2-1b-stage2-repo.yaml        # and -rope; see docs/training.md",
        "python -m repo_train export --checkpoint <ckpt> --out hf/olmo2-1b-repo --tokenizer <olmo2 dir>",
        "scripts/run_search.sh --model <hf dir> --task kv --config configs/search/lpes.yaml --out scales/NAME.json",
        "python -m evaluation run --model <hf dir> --tasks mdqa,kv --data-dir ../shared/data/lost_in_the_middle \\",
        "    --method baseline --method lpes:scale_file=scales/NAME.json --method caliope:calibrator=hourglass \\",
        "    --method fim --method pcd --out results/NAME",
        "```",
    ]
    (out / "README.md").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
