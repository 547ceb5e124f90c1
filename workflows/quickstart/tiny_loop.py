"""The quickstart's built-in default: the whole loop on the shipped tiny models, on the CPU, in minutes.

The base has a measured lost middle (workflows/assets/tiny-kv-dip), so every training-free
method has something to repair; the shipped RoPE/REPO pair is continued for a few steps
more, so that REPO's row shows learned positions (they need hundreds of steps to spread,
more than a CPU budget). Every step is one of the project's commands, recorded in
OUT/steps.json (a rerun resumes) and OUT/commands.sh.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml
from jsonargparse import Namespace

from repo_common.config_cli import deferred
from workflows import loop_config
from workflows import position_bias as recipe
from workflows.commands import CommandRunner, cpu_trainer_section, last_checkpoint
from workflows.quickstart.options import ROOT
from workflows.quickstart.report import tiny_report_parts, write_report
from workflows.quickstart.resume import search_files, search_resume, training_resume
from workflows.steps import StepLedger, StepRunner

#: Seed of the KV streams the built-in loop trains on: the pair was made on seed 0, so continuing it uses others.
CONTINUE_DATA_SEED = 1
#: The methods the tiny loop evaluates on the base; {scale_file}, {mean_scale} are filled after the search.
#: CALIOPE's published gaps add thousands of positions to a ~200-token context; "context-sized" gaps keep the
#: calibrated positions within the lengths the model was trained on (docs/methods/caliope.md).
BASE_METHODS = (
    "baseline",
    "lpes:scale_file={scale_file}",
    "pi:scale={mean_scale}",
    "caliope:calibrator=hourglass,delta_min=0,delta_max=0.25",
    "caliope:calibrator=moses,delta_gap=4",
    "caliope:calibrator=hourglass",
    "pcd",
)
#: Found in the Middle calibrates each prompt with one extra prefill per item (65 for 64 pairs), so at the
#: quickstart's budget it runs on its own smaller set of questions, with that set's baseline.
FIM_METHODS = ("baseline", "fim:dummy=blank")
#: Reads the REPO model's positions with torch: imported when the loop gets there, so the quickstart's
#: `--print_config` and the scripts that share this recipe answer without loading torch.
plot_repo_positions = deferred("workflows.quickstart.repo_positions", "plot_repo_positions")


def tiny_settings(args: Namespace) -> argparse.Namespace:
    """The position-bias recipe's settings (workflows/position_bias.py) at the quickstart's budget."""
    return recipe.parse_args(
        ["--base", str(args.base), "--seeds", "1", "--steps", str(args.steps), "--lr", str(args.lr),
         "--eval_examples", str(args.eval_examples), "--generations", str(args.generations),
         "--population", str(args.population), "--search_examples", "16"]
    )  # fmt: skip


def training_config(
    out: Path, method: str, data: Path, settings: argparse.Namespace, init_from: Path | None = None
) -> Path:
    """LightningCLI config continuing `init_from` (default: the base) with `method` on the edge-gold KV data.
    REPO from the base: fresh predictors, handed over from RoPE positions along a curriculum over half the steps;
    REPO from a REPO model (the shipped pair): its learned predictors, no curriculum."""
    steps = settings.steps
    fresh_repo = method == "repo" and init_from is None
    curriculum = {"curriculum_start": 1.0, "curriculum_steps": steps // 2}
    position = {"class_path": "RepoPosition", "init_args": curriculum} if fresh_repo else method
    config = {
        "seed_everything": 42,
        "trainer": cpu_trainer_section(steps, out / "runs" / method, log_every_n_steps=max(1, steps // 4)),
        "model": {
            "init_from": str(init_from or settings.base),
            "position": position,
            "lr": settings.lr,
            "warmup_steps": min(20, steps // 10),
        },
        "data": {
            "train": {
                "class_path": "repo_train.data.PromptCompletionData",
                "init_args": {"paths": [str(data)], "tokenizer": str(settings.base), "seq_len": 3 * settings.pairs + 8},
            },
            "global_batch_size": 32,
            "micro_batch_size": 32,
        },
        "checkpoint": {"every_n_train_steps": steps},
    }
    path = out / "configs" / f"train-{method}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def pair_history(pair: Path | None) -> dict | None:
    """What the shipped pair's pair.json says about how it was made (None: no pair, both start from the base)."""
    if pair is None:
        return None
    path = pair / "pair.json"
    try:
        made = json.loads(path.read_text())
        return {"name": pair.name, "steps": int(made["steps"]), "curriculum_steps": int(made["curriculum_steps"])}
    except (OSError, ValueError, KeyError, TypeError):
        raise SystemExit(f"{path}: not the pair.json of scripts/make_tiny_repo_pair.py; remake the pair") from None


def tiny_loop(args: Namespace, out: Path) -> None:
    """The built-in loop on the tiny dip base; every step recorded in OUT/steps.json (rerun = resume)."""
    run = CommandRunner(out, description="The commands this quickstart ran, in order.", cwd=ROOT)
    steps = StepRunner(run, StepLedger(out / "steps.json"))
    started = time.perf_counter()

    if not (Path(args.base) / "config.json").is_file():
        raise SystemExit(f"--base {args.base!r} is not an HF model directory (make one: scripts/make_tiny_dip_base.py)")
    settings = tiny_settings(args)
    settings.fim_examples = args.fim_examples
    data = out / "data" / "kv-train.jsonl"
    pair = None if args.pair == "none" else Path(args.pair)
    counts = recipe.write_training_data(data, CONTINUE_DATA_SEED if pair else 0, settings)
    print(f"training data: {counts['examples']} KV streams, the gold pair in the first or last 4 of 64", flush=True)
    models = {}
    for method in ("rope", "repo"):
        start = pair / method if pair else None
        config = training_config(out, method, data, settings, init_from=start)
        run_dir = out / "runs" / method
        steps.step(f"train-{method}", f"train tiny OLMo-2 with {method.upper()}",
                   ["repo_train", "fit", "--config", str(config)], module=True,
                   inputs=[config, start or args.base, data], outputs=[run_dir],
                   resume=lambda d=run_dir: training_resume(d))  # fmt: skip
        checkpoint = last_checkpoint(run_dir)
        models[method] = out / "models" / method
        steps.step(f"export-{method}", f"export the {method.upper()} checkpoint",
                   ["repo_train", "export", "--checkpoint", str(checkpoint), "--out", str(models[method]),
                    "--tokenizer", str(args.base)], module=True, inputs=[checkpoint, args.base],
                   outputs=[models[method]], after=[f"train-{method}"])  # fmt: skip

    # the training-free methods act on the model with the measured dip; the continued models are compared as trained
    scale_file = out / "scales" / "base-kv.json"
    search_config = recipe.search_config(out, settings)
    steps.step("search", "LPES search on the base model", ["search", "run", "--model.path", str(args.base), "--config",
               str(search_config), "--out", str(scale_file)], module=True, inputs=[args.base, search_config],
               outputs=[scale_file], related=search_files(scale_file),
               resume=lambda: search_resume(scale_file))  # fmt: skip
    values = {"scale_file": str(scale_file), "mean_scale": f"{loop_config.mean_scale(scale_file):.4g}"}
    base_methods = [loop_config.fill(method, values) for method in BASE_METHODS]
    eval_dirs = {name: out / "eval" / name for name in ("base", "base-fim", "rope", "repo")}
    fim_settings = argparse.Namespace(**{**vars(settings), "eval_examples": args.fim_examples})
    evaluations = {  # name: title, model, methods, settings, the steps whose outputs it reads
        "base": ("evaluate the base model with every method", Path(args.base), base_methods, settings, ["search"]),
        "base-fim": ("evaluate the base model with Found in the Middle (fewer questions)", Path(args.base),
                     FIM_METHODS, fim_settings, []),
        "rope": ("evaluate the RoPE-continued model", models["rope"], ["baseline"], settings, ["export-rope"]),
        "repo": ("evaluate the REPO-continued model", models["repo"], ["baseline"], settings, ["export-repo"]),
    }  # fmt: skip
    for name, (title, model, methods, task_settings, after) in evaluations.items():
        argv = recipe.eval_command(model, eval_dirs[name], methods, task_settings)
        # resume=list: an interrupted evaluation resumes by running the same command (its records are kept)
        steps.step(f"eval-{name}", title, argv, module=True, inputs=[model], outputs=[eval_dirs[name]], after=after,
                   resume=list)  # fmt: skip
    run("one plot: every method on the base, the continued models", "evaluation", "report", "--out",
        str(eval_dirs["base"]), *(arg for name in ("base-fim", "rope", "repo") for arg in ("--compare",
        str(eval_dirs[name]))))  # fmt: skip
    positions_plot, positions = plot_repo_positions(out, models["repo"], settings)
    history = pair_history(pair)
    write_report(out, run, eval_dirs, time.perf_counter() - started, *tiny_report_parts(out, settings, eval_dirs,
                 scale_file, positions_plot, positions, history))  # fmt: skip
    print(f"\nreport: {out / 'README.md'}")
