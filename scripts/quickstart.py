#!/usr/bin/env python
"""The whole loop on the built-in default, CPU only: train, search, calibrate, evaluate, report.

    python scripts/quickstart.py [--out outputs/quickstart] [--steps 300]

1. continual-trains two tiny OLMo-2 models, RoPE and REPO (same size, data and
   steps), with the real Lightning path, on short-key KV-retrieval text
   encoded by the byte tokenizer, and exports them as HF directories;
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

from repo_train.commands import CommandRunner

ROOT = Path(__file__).resolve().parents[1]
KV_SEED_TRAIN, KV_SEED_SEARCH, KV_SEED_EVAL = 1000, 2000, 3000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/quickstart", help="report directory (created)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per model")
    parser.add_argument("--hidden", type=int, default=128, help="model width")
    parser.add_argument("--num-keys", type=int, default=6, help="KV pairs per prompt (positions evaluated)")
    parser.add_argument("--key-chars", type=int, default=4, help="hex digits per key and value")
    parser.add_argument("--train-examples", type=int, default=8000)
    parser.add_argument("--eval-examples", type=int, default=20, help="examples per gold position")
    parser.add_argument("--generations", type=int, default=2, help="LPES breeding rounds")
    return parser.parse_args()


def write_training_data(out: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """Byte tokenizer + KV text (prompt, space, value): one random gold position per example."""
    from evaluation.models import byte_tokenizer
    from evaluation.tasks import build_task

    tokenizer_dir = out / "tokenizer"
    byte_tokenizer().save_pretrained(tokenizer_dir)
    task = build_task(
        "kv",
        num_keys=args.num_keys,
        num_examples=args.train_examples,
        key_chars=args.key_chars,
        gold_positions="all",
        seed=KV_SEED_TRAIN,
    )
    rng = random.Random(0)
    by_example: dict[str, list[dict]] = {}
    for row in task.rows():
        by_example.setdefault(row["example_id"], []).append(row)
    data = out / "data" / "kv-train.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    with data.open("w") as handle:
        for rows in by_example.values():
            row = rng.choice(rows)
            handle.write(json.dumps({"text": f"{row['prompt']} {row['value']}"}) + "\n")
    return tokenizer_dir, data


def training_config(out: Path, method: str, tokenizer_dir: Path, data: Path, args: argparse.Namespace) -> Path:
    from evaluation.models import byte_tokenizer

    vocab = len(byte_tokenizer())
    config = {
        "seed_everything": 42,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "precision": "32-true",
            "max_steps": args.steps,
            "gradient_clip_val": 1.0,
            "use_distributed_sampler": False,
            "log_every_n_steps": 25,
            "default_root_dir": str(out / "runs" / method),
        },
        "model": {
            "preset_name": "tiny",
            "position_method": method,
            "lr": 0.003,
            "config_overrides": {
                "vocab_size": vocab,
                "pad_token_id": 0,
                "eos_token_id": 1,
                "bos_token_id": None,
                "hidden_size": args.hidden,
                "intermediate_size": 4 * args.hidden,
            },
        },
        "data": {
            "train": {"source": "text", "paths": [str(data)], "tokenizer": str(tokenizer_dir), "seq_len": 512},
            "global_batch_size": 16,
            "micro_batch_size": 16,
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
            "num_examples": 8,
            "seed": KV_SEED_SEARCH,
            "max_new_tokens": args.key_chars + 2,
            "batch_size": 8,
            "key_chars": args.key_chars,
        },
        "space": {"num_points": 3},
        "ga": {"population": 8, "parents": 4, "generations": args.generations, "mutation_offspring": 3,
               "crossover_offspring": 1},
        "held_out": {"num_examples": 8},
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
    row = next(iter(build_task("kv", num_keys=args.num_keys, num_examples=1, key_chars=args.key_chars,
                               gold_positions=0, seed=KV_SEED_EVAL).rows()))  # fmt: skip
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

    tokenizer_dir, data = write_training_data(out, args)
    models = {}
    for method in ("rope", "repo"):
        config = training_config(out, method, tokenizer_dir, data, args)
        run(f"train tiny OLMo-2 with {method.upper()}", "repo_train", "fit", "--config", str(config))
        checkpoint = next((out / "runs" / method).rglob("last.ckpt"))
        models[method] = out / "models" / method
        run(f"export the {method.upper()} checkpoint", "repo_train", "export", "--checkpoint", str(checkpoint),
            "--out", str(models[method]), "--tokenizer", str(tokenizer_dir))  # fmt: skip

    scale_file = out / "scales" / "rope-kv.json"
    run("LPES search on the RoPE model", "search", "run", "--model", str(models["rope"]), "--config",
        str(search_config(out, args)), "--out", str(scale_file))  # fmt: skip
    mean_scale = sum(json.loads(scale_file.read_text())["scales"]) / _num_layers(scale_file)

    common = ["--tasks", "kv", "--num-keys", str(args.num_keys), "--num-examples", str(args.eval_examples),
              "--task-param", f"kv:key_chars={args.key_chars}", "--seed", str(KV_SEED_EVAL),
              "--gold-positions", "all", "--max-new-tokens", str(args.key_chars + 2)]  # fmt: skip
    eval_dirs = {"rope": out / "eval" / "rope", "repo": out / "eval" / "repo"}
    run("evaluate the RoPE model with every method", "evaluation", "run", "--model", str(models["rope"]), *common,
        "--method", "baseline", "--method", f"lpes:scale_file={scale_file}", "--method", f"pi:scale={mean_scale:.4g}",
        "--method", "caliope:calibrator=hourglass", "--method", "fim:dummy=blank", "--method", "pcd",
        "--out", str(eval_dirs["rope"]))  # fmt: skip
    run("evaluate the REPO model", "evaluation", "run", "--model", str(models["repo"]), *common,
        "--method", "baseline", "--out", str(eval_dirs["repo"]))  # fmt: skip
    run("one plot: RoPE methods and the REPO model", "evaluation", "report", "--out", str(eval_dirs["rope"]),
        "--compare", str(eval_dirs["repo"]))  # fmt: skip
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
            f"Built in {seconds / 60:.1f} min on this machine. Tiny OLMo-2 models (d={args.hidden}, 4 layers) trained "
            f"{args.steps} steps on KV retrieval text ({args.num_keys} pairs of {args.key_chars}-hex-digit keys, byte "
            "tokenizer), then evaluated with the gold pair at every position. These are smoke-scale models: read the "
            "numbers as a check that every piece runs, not as evidence for or against a method."
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
