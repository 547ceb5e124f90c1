#!/usr/bin/env python
"""The whole loop: train, search, calibrate, evaluate, report; on the built-in tiny default, or from a config.

    python scripts/quickstart.py [--out outputs/quickstart] [--steps 1000]
    python scripts/quickstart.py --config configs/quickstart/olmo2-1b.yaml [--out DIR] [--dry-run]

Without --config, on the CPU:

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

With --config the same loop runs at full scale: an OLMo-2 checkpoint
directory, the train configs' data, the launchers the file names
(scripts/launch_train.sh, scripts/run_search.sh), the evaluation it lists; the
file is documented key by key in configs/quickstart/olmo2-1b.yaml and checked
before any step runs (repo_train/scripting/loop_config.py). --dry-run writes and prints
OUT/commands.sh and runs nothing: read it before spending GPU hours.

Every step is one of the project's commands, run as a subprocess and
written into OUT/commands.sh, so each can be rerun alone or at full scale.
The script holds run constants only; the work is in the packages.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import yaml
from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_train.config_cli import ConfigParser, dump_config
from repo_train.scripting import loop_config
from repo_train.scripting.commands import CommandRunner, cpu_trainer_section, last_checkpoint

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "assets" / "tiny-kv-base"
KV_SEED_TRAIN, KV_SEED_SEARCH, KV_SEED_EVAL = 1000, 2000, 3000


#: Options of the built-in tiny loop; a loop file (train/search/evaluate sections) sets the run, so they are refused.
TINY_OPTIONS = ("steps", "lr", "num_keys", "key_chars", "train_examples", "eval_examples", "generations", "edge_share")
PROG = "scripts/quickstart.py"


def build_parser() -> ConfigParser:
    """The quickstart's options; a loop file (configs/quickstart/*.yaml) sets `base` and the three sections."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument(
        "--out",
        type=str | None,
        help="report directory (created; default outputs/quickstart, outputs/quickstart-NAME for --config NAME.yaml)",
    )
    parser.add_argument(
        "--dry_run", "--dry-run", action="store_true", help="loop file only: write and print commands.sh, run nothing"
    )
    parser.add_argument("--base", type=str | None, help="HF directory to continue from (default: the built-in)")
    tiny = "built-in tiny loop only"
    parser.add_argument("--steps", type=PositiveInt, default=1000, help=f"training steps per model ({tiny})")
    parser.add_argument("--lr", type=float, default=1e-3, help=f"peak learning rate ({tiny})")
    parser.add_argument("--num_keys", "--num-keys", type=PositiveInt, default=8, help=f"KV pairs per prompt ({tiny})")
    parser.add_argument(
        "--key_chars", "--key-chars", type=PositiveInt, default=1, help=f"key/value characters ({tiny})"
    )
    parser.add_argument("--train_examples", "--train-examples", type=PositiveInt, default=4000, help=tiny)
    parser.add_argument(
        "--eval_examples", "--eval-examples", type=PositiveInt, default=40, help=f"examples per position ({tiny})"
    )
    parser.add_argument("--generations", type=int, default=2, help=f"LPES breeding rounds ({tiny})")
    parser.add_argument(
        "--edge_share",
        "--edge-share",
        type=float | None,
        help="train with this share of gold pairs in the first and last two positions (e.g. 0.95) instead of "
        f"uniform: gives the model a position bias to correct (docs/reproductions.md; {tiny})",
    )
    parser.add_argument("--train", type=loop_config.TrainSection | None, help="loop file: the training runs")
    parser.add_argument("--search", type=loop_config.SearchSection | None, help="loop file: the LPES search")
    parser.add_argument("--evaluate", type=loop_config.EvaluateSection | None, help="loop file: the harness runs")
    return parser


def _from_root(argv: list[str]) -> list[str]:
    """Relative --config paths are taken from the repository root (where every command runs), from any directory."""
    fixed = list(argv)
    for i, arg in enumerate(fixed):
        if arg == "--config" and i + 1 < len(fixed) and not Path(fixed[i + 1]).is_absolute():
            fixed[i + 1] = str(ROOT / fixed[i + 1])
        elif arg.startswith("--config=") and not Path(arg.split("=", 1)[1]).is_absolute():
            fixed[i] = f"--config={ROOT / arg.split('=', 1)[1]}"
    return fixed


def parse_args(argv: list[str] | None = None) -> Namespace:
    """The options; in loop-file mode `args.loop` is the checked `LoopConfig` (else None). Mistakes: one line, exit 2."""
    parser = build_parser()
    argv = _from_root(list(sys.argv[1:] if argv is None else argv))
    args, show = parser.parse(argv)
    files = [str(path) for path in args.config or []]
    sections = {name: args[name] for name in ("train", "search", "evaluate")}
    args.loop = None
    if not any(sections.values()):
        if args.dry_run:
            parser.fail("--dry-run needs a loop file (--config FILE; the built-in loop writes commands.sh as it runs)")
        args.base = args.base or str(BASE)
        args.out = args.out or "outputs/quickstart"
    else:
        name = (
            (Path(files[-1]).relative_to(ROOT) if Path(files[-1]).is_relative_to(ROOT) else files[-1])
            if files
            else "the loop"
        )
        missing = [key for key, value in {"base": args.base, **sections}.items() if value is None]
        if missing:
            parser.fail(f"{name}: missing {', '.join(missing)}; a loop file sets base, train, search and evaluate")
        flags = {a.split("=")[0] for a in argv}
        given = sorted(f for o in TINY_OPTIONS for f in {f"--{o}", f"--{o.replace('_', '-')}"} if f in flags)
        if given:
            parser.fail(f"{', '.join(given)}: built-in tiny loop only; with a loop file the file sets the run")
        try:
            built = parser.instantiate(args)
            args.loop = loop_config.LoopConfig(built.base, built.train, built.search, built.evaluate, path=str(name))
            loop_config.check_files(args.loop, ROOT)
        except ValueError as err:
            parser.fail(f"{name}: {err}")
        args.out = args.out or f"outputs/quickstart-{Path(files[-1]).stem}"
        args.config_name = str(name)
    if show:
        print(dump_config(resolved_config(args)), end="")
        raise SystemExit(0)
    return args


def resolved_config(args: Namespace) -> dict:
    """What will run, as a loop file (loop mode) or the tiny loop's options: --print_config's output."""
    head = {"out": args.out, "base": args.base}
    if args.loop is None:
        return {**head, **{name: args[name] for name in TINY_OPTIONS}}
    loop = args.loop
    sections = {name: dataclasses.asdict(getattr(loop, name)) for name in ("train", "search", "evaluate")}
    return {**head, **sections, "dry_run": args.dry_run}


def kv_params(args: Namespace, **more) -> dict:
    """The harness's KV task in the base's format: generated short keys, "pairs" template."""
    return dict(num_keys=args.num_keys, key_chars=args.key_chars, template="pairs", **more)


def write_training_data(out: Path, args: Namespace) -> Path:
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


def training_config(out: Path, method: str, data: Path, args: Namespace) -> Path:
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


def search_config(out: Path, args: Namespace) -> Path:
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


def plot_repo_positions(out: Path, model_dir: Path, args: Namespace) -> Path:
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
    if args.loop is not None:
        run_config(args, out)
        return
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
        checkpoint = last_checkpoint(out / "runs" / method)
        models[method] = out / "models" / method
        run(f"export the {method.upper()} checkpoint", "repo_train", "export", "--checkpoint", str(checkpoint),
            "--out", str(models[method]), "--tokenizer", str(args.base))  # fmt: skip

    scale_file = out / "scales" / "rope-kv.json"
    run("LPES search on the RoPE model", "search", "run", "--model", str(models["rope"]), "--config",
        str(search_config(out, args)), "--out", str(scale_file))  # fmt: skip
    mean_scale = loop_config.mean_scale(scale_file)

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
    write_report(out, run, eval_dirs, time.perf_counter() - started, *tiny_report_parts(out, args, eval_dirs,
                 scale_file, positions_plot))  # fmt: skip
    print(f"\nreport: {out / 'README.md'}")


def run_config(args: Namespace, out: Path) -> None:
    """The loop of a config file: each train method through its launcher, export, search, evaluate, report."""
    config = args.loop
    values = {"out": str(out), "base": config.base, "python": sys.executable}
    problems = loop_config.machine_problems(config, ROOT, values)
    if problems and not args.dry_run:
        raise SystemExit("\n".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    description = f"The commands of {args.config_name}, in order."
    if args.dry_run:
        description = f"Dry run of {args.config_name}: nothing was run; <...> marks a value known only after a step."
    run = CommandRunner(out, description=description, cwd=ROOT, dry_run=args.dry_run)
    started = time.perf_counter()

    def fill(items: list[str]) -> list[str]:
        return [loop_config.fill(item, values) for item in items]

    models = {loop_config.BASE_MODEL: config.base}
    for name, train_config in config.train.methods.items():
        run_dir = out / "runs" / name
        run.run_argv(f"train {name}", [*fill(config.train.launcher), train_config, "--trainer.default_root_dir",
                     str(run_dir), "--model.init_from", config.base, *fill(config.train.args)])  # fmt: skip
        checkpoint = f"<last.ckpt under {run_dir}>" if args.dry_run else str(last_checkpoint(run_dir))
        models[name] = str(out / "models" / name)
        run(f"export the {name} checkpoint", "repo_train", "export", "--checkpoint", checkpoint, "--out",
            models[name], "--tokenizer", config.base)  # fmt: skip

    scale_file = out / "scales" / f"{config.search.model}.json"
    run.run_argv(f"LPES search on the {config.search.model} model", [*fill(config.search.launcher), "--model",
                 models[config.search.model], "--config", config.search.config, "--out", str(scale_file),
                 *fill(config.search.args)])  # fmt: skip
    values["scale_file"] = str(scale_file)
    mean = f"<mean of the scales in {scale_file}>" if args.dry_run else f"{loop_config.mean_scale(scale_file):.6g}"
    values["mean_scale"] = mean

    eval_dirs = {}
    for name, methods in config.evaluate.methods.items():
        eval_dirs[name] = out / "eval" / name
        method_args = [arg for method in fill(methods) for arg in ("--method", method)]
        run(f"evaluate the {name} model", "evaluation", "run", "--model", models[name], *fill(config.evaluate.args),
            *method_args, "--out", str(eval_dirs[name]))  # fmt: skip
    first, *others = eval_dirs.values()
    if others:
        run("one plot: every evaluated model and method", "evaluation", "report", "--out", str(first),
            *(arg for other in others for arg in ("--compare", str(other))))  # fmt: skip
    if args.dry_run:
        print(f"\ndry run: nothing was run; the commands are in {run.script}", flush=True)
        for problem in problems:
            print(f"warning: a real run here would stop at once: {problem}", file=sys.stderr)
        return
    write_report(out, run, eval_dirs, time.perf_counter() - started, *config_report_parts(out, args, config,
                 eval_dirs, scale_file, models))  # fmt: skip
    print(f"\nreport: {out / 'README.md'}")


def results_table(eval_dirs: dict[str, Path]) -> list[str]:
    """Overall accuracy, CI, curve shape, ρ and worst position per (model, method, task), from each summary.json."""
    lines = [
        "| model | method | task | questions (prompts) | accuracy [95% CI] | shape | ρ | worst position (acc) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, directory in eval_dirs.items():
        for task, results in json.loads((directory / "summary.json").read_text())["results"].items():
            for method, r in results.items():
                rho = "n/a" if r["rho"] is None else f"{r['rho']:.1f}"
                low, high = r["accuracy_ci"]
                worst = (
                    "– (flat)" if r["worst_position"] is None else f"{r['worst_position']} ({r['worst_accuracy']:.3f})"
                )
                lines.append(
                    f"| {model} | `{method}` | {task} | {r['n_examples']} ({r['n']}) | {r['accuracy']:.3f} "
                    f"[{low:.3f}, {high:.3f}] | {r['shape']} | {rho} | {worst} |"
                )
    return lines


def tiny_report_parts(out, args, eval_dirs, scale_file, positions_plot) -> tuple[str, list[str], list[str]]:
    """Intro, outputs and closing of the built-in loop's report: what the tiny models are and are not evidence of."""
    stem = scale_file.with_suffix("")
    intro = (
        f"The tiny base `{Path(args.base).name}` (4-layer RoPE "
        f"OLMo-2, byte tokenizer, pre-trained to retrieve) continued for {args.steps} steps with RoPE and with "
        f"REPO on KV retrieval ({args.num_keys} pairs, {args.key_chars}-character keys, the harness's `pairs` "
        "template, loss on the answer), then evaluated with the gold pair at every position. Tiny models on a "
        "short context: read the numbers as a check that every piece runs on a model that does the task, not "
        "as evidence for or against a method at scale (docs/reproductions.md)."
    )
    outputs = [
        f"- RoPE model, every method: [report]({(eval_dirs['rope'] / 'report.md').relative_to(out)})",
        f"- REPO model, baseline: [report]({(eval_dirs['repo'] / 'report.md').relative_to(out)})",
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
        "```bash",
        "python scripts/quickstart.py --config configs/quickstart/olmo2-1b.yaml --dry-run   # the whole loop; or:",
        "scripts/launch_train.sh configs/train/olmo2-1b-stage2-repo.yaml        # and -rope; see docs/training.md",
        "python -m repo_train export --checkpoint <ckpt> --out hf/olmo2-1b-repo --tokenizer <olmo2 dir>",
        "scripts/run_search.sh --model <hf dir> --task kv --config configs/search/lpes.yaml --out scales/NAME.json",
        "python -m evaluation run --model <hf dir> --tasks mdqa,kv --data-dir ../shared/data/lost_in_the_middle \\",
        "    --method baseline --method lpes:scale_file=scales/NAME.json --method caliope:calibrator=hourglass \\",
        "    --method fim --method pcd --out results/NAME",
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
                f"--out {out / 'repo-positions' / name}` (its settings with `--task-param KEY=VALUE`)"
            )
    outputs.append("- Checkpoints: `runs/<method>/` (Lightning), `models/<method>/` (HF, with tokenizer)")
    closing = [
        "## Rerun",
        "",
        "```bash",
        f"python scripts/quickstart.py --config {args.config_name} --out {out}",
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


if __name__ == "__main__":
    main()
