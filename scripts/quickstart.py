#!/usr/bin/env python
"""The whole loop: train, search, calibrate, evaluate, report; on the built-in tiny default, or from a config.

    python scripts/quickstart.py [--out outputs/quickstart] [--steps 10] [--print_config]
    python scripts/quickstart.py --config configs/quickstart/olmo2-1b.yaml [--out DIR] [--dry-run]

Without a loop file, on the CPU, on the built-in base assets/tiny-kv-dip (a
4-layer RoPE OLMo-2 that retrieves at the edges of a 64-pair context and loses
the middle; scripts/make_tiny_dip_base.py):

1. continues the shipped pair assets/tiny-kv-dip-continued (the base
   continued for 600 steps with RoPE and with REPO on the same data:
   scripts/make_tiny_repo_pair.py; REPO's positions need hundreds of steps to
   spread, more than a CPU budget) for --steps more steps each on fresh KV
   streams, with the real Lightning path, and exports both as HF directories.
   With another --base (or --pair none) both start from the base instead, REPO
   from fresh predictors along a curriculum from the base's RoPE positions;
2. runs an LPES search on the base and writes a scale file;
3. evaluates on the base, with held-out prompts and the gold pair at 8
   positions: baseline, LPES, PI at the mean scale, CALIOPE with context-sized
   and with published gaps, PCD, and Found in the Middle on fewer questions
   (one extra prefill per pair); then the two continued models' baselines;
4. writes one report directory: README.md (a results table with Δ, CIs, Holm
   p and verdict words; commands), the plots, the scale file, the checkpoints.

With a loop file (--config) the same loop runs at full scale: an OLMo-2 checkpoint
directory, the train configs' data, the launchers the file names
(scripts/launch_train.sh, scripts/run_search.sh), the evaluation it lists; the
file is documented key by key in configs/quickstart/olmo2-1b.yaml and checked
before any step runs (workflows/loop_config.py). --dry-run writes and prints
OUT/commands.sh and runs nothing: read it before spending GPU hours.

Every step is one of the project's commands, run as a subprocess and
written into OUT/commands.sh, so each can be rerun alone or at full scale.
The script holds run constants only; the work is in the packages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import yaml
from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, dump_config, take_flag
from repo_common.run_lock import RunLockedError, run_lock
from workflows import loop_config
from workflows import loop_estimates as estimates
from workflows.commands import CommandRunner, cpu_trainer_section, last_checkpoint, newest_last_checkpoint
from workflows.steps import StepLedger, StepRunner, gpu_slots, visible_devices

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the position-bias recipe lives in the reproduction script beside this one

import reproduce_position_bias as recipe

#: The built-in base: a tiny RoPE OLMo-2 that retrieves at the edges of a 64-pair context and loses the middle.
BASE = ROOT / "assets" / "tiny-kv-dip"
#: The base continued with RoPE (rope/) and REPO (repo/) on the same data for the same steps (pair.json says how
#: many): the built-in loop continues these, so that its REPO model has learned positions (make_tiny_repo_pair.py).
PAIR = ROOT / "assets" / "tiny-kv-dip-continued"
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


#: Options of the built-in tiny loop; a loop file (train/search/evaluate sections) sets the run, so they are refused.
TINY_OPTIONS = ("steps", "lr", "eval_examples", "fim_examples", "generations", "population", "pair")
PROG = "scripts/quickstart.py"
#: The output directory's lock: one quickstart writes it at a time.
LOCK_NAME = "quickstart.lock"


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
    loop = "loop file only"
    parser.add_argument("--gpus", type=PositiveInt | None, help=f"GPUs of the node: processes per step ({loop})")
    parser.add_argument(
        "--data_dir", "--data-dir", type=str | None, help=f"the Lost in the Middle release's qa_data folder ({loop})"
    )
    tiny = "built-in tiny loop only"
    parser.add_argument("--steps", type=PositiveInt, default=10, help=f"continual-training steps per model ({tiny})")
    parser.add_argument("--lr", type=float, default=1e-3, help=f"peak learning rate ({tiny})")
    parser.add_argument(
        "--pair",
        type=str | None,
        help=f"the RoPE/REPO pair to continue, DIR/rope and DIR/repo, or none: both start from --base, REPO's "
        f"predictors fresh (default: {PAIR.relative_to(ROOT)} with the built-in base, else none; {tiny})",
    )
    parser.add_argument(
        "--eval_examples", "--eval-examples", type=PositiveInt, default=50, help=f"questions per position ({tiny})"
    )
    parser.add_argument(
        "--fim_examples", "--fim-examples", type=PositiveInt, default=3, help=f"FiM's questions per position ({tiny})"
    )
    parser.add_argument("--generations", type=int, default=2, help=f"LPES breeding rounds ({tiny})")
    parser.add_argument("--population", type=PositiveInt, default=8, help=f"LPES population ({tiny})")
    parser.add_argument("--train", type=loop_config.TrainSection | None, help="loop file: the training runs")
    parser.add_argument("--search", type=loop_config.SearchSection | None, help="loop file: the LPES search")
    parser.add_argument("--evaluate", type=loop_config.EvaluateSection | None, help="loop file: the harness runs")
    return parser


def _from_root(argv: list[str]) -> list[str]:
    """Relative --config paths are taken from the repository root (where every command runs), from any directory."""
    try:
        files, rest = take_flag(argv, "--config")
    except ValueError:
        return argv  # the parser names the mistake
    return [arg for path in files for arg in ("--config", str(ROOT / path))] + rest  # ROOT / absolute = absolute


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
        given = [f"--{name}" for name in ("gpus", "data_dir") if args[name] is not None]
        if given:
            parser.fail(f"{', '.join(given)}: loop file only (--config FILE); the built-in loop runs on the CPU")
        builtin_base = args.base is None or Path(args.base).resolve() == BASE
        args.base = args.base or str(BASE)
        args.out = "outputs/quickstart" if args.out is None else args.out  # `--out ''` is refused by main
        if args.pair is None:
            args.pair = str(PAIR) if builtin_base else "none"
        if args.pair != "none" and not all((Path(args.pair) / m / "config.json").is_file() for m in ("rope", "repo")):
            parser.fail(f"--pair {args.pair}: needs rope/ and repo/ HF directories (scripts/make_tiny_repo_pair.py)")
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
            args.loop = loop_config.LoopConfig(
                built.base, built.train, built.search, built.evaluate, path=str(name), gpus=args.gpus or 1,
                data_dir=args.data_dir,
            )  # fmt: skip
            loop_config.check_files(args.loop, ROOT)
            loop_config.check_training(args.loop, ROOT)  # each train config as `fit` parses it, before any training
            loop_config.check_evaluations(args.loop)  # every method, task and option the evaluations will pass
            check_search(args.loop)
        except ValueError as err:
            parser.fail(f"{name}: {err}")
        args.out = f"outputs/quickstart-{Path(files[-1]).stem}" if args.out is None else args.out
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
    return {**head, "gpus": loop.gpus, "data_dir": loop.data_dir, **sections, "dry_run": args.dry_run}


def tiny_settings(args: Namespace) -> argparse.Namespace:
    """The position-bias recipe's settings (scripts/reproduce_position_bias.py) at the quickstart's budget."""
    return recipe.parse_args(
        ["--base", str(args.base), "--seeds", "1", "--steps", str(args.steps), "--lr", str(args.lr),
         "--eval-examples", str(args.eval_examples), "--generations", str(args.generations),
         "--population", str(args.population), "--search-examples", "16"]
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


def plot_repo_positions(out: Path, model_dir: Path, settings: argparse.Namespace) -> tuple[Path, dict]:
    """Positions per head of the last REPO layer on one evaluation prompt (REPO paper's position figures),
    and how far each REPO layer's positions spread: {"tokens", "start_layer", "spans": per layer, per head}."""
    import torch

    from evaluation.head_position_plot import plot_head_positions  # heavy: torch and matplotlib stay out of --help
    from evaluation.model_loading import load_model  # heavy: torch and transformers stay out of --help
    from evaluation.tasks import build_task
    from repo_train.modeling import record_positions

    model, tokenizer = load_model(str(model_dir))
    params = {**recipe.kv_params(settings), "num_examples": 1, "gold_positions": 0, "seed": recipe.EVAL_SEED}
    row = next(iter(build_task("kv", **params).rows()))
    ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
    with torch.no_grad(), record_positions(model) as recorder:
        model(ids)
    start = model.config.repo_start_layer
    learned = {layer: p for layer, p in enumerate(recorder.positions) if p is not None and layer >= start}
    path = out / "repo_positions_last_layer.png"
    plot_head_positions(learned[max(learned)], title="REPO positions per head, last layer, one KV prompt", path=path,
                        detail_tokens=30)  # fmt: skip
    spans = {
        layer: [float(head.max() - head.min()) for head in positions.reshape(-1, positions.shape[-1])]
        for layer, positions in learned.items()
    }
    return path, {"tokens": ids.shape[1], "start_layer": start, "spans": spans}


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
    from evaluation.results import compare_with_baseline, read_records
    from evaluation.statistics import holm_adjust

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
    from evaluation.report import delta_cell, p_cell

    lines = [
        "| model | Δ vs the base [95% CI] | p (Holm) | verdict | Δ middle vs the base [95% CI] | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, parts in comparisons.items():
        cells = [cell for vs in parts for cell in (delta_cell(vs), p_cell(vs, "p_holm"), _verdict(vs))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _verdict(vs: dict) -> str:
    from evaluation.statistics import verdict

    return verdict(vs["low"], vs["high"], vs["p_holm"], vs["identical"])


METHOD_NAMES = {"rope": "RoPE", "repo": "REPO"}


def continued_sentence(comparisons: dict[str, list[dict]]) -> str:
    """One bold line: what continuing did to each model against the base (Δ overall, CI, verdict)."""
    parts = [
        f"{METHOD_NAMES[name]} {vs['mean_diff']:+.3f} [{vs['low']:+.3f}, {vs['high']:+.3f}], {_verdict(vs)}"
        for name, (vs, _) in comparisons.items()
    ]
    return "**Against the base they came from, accuracy changed by " + "; ".join(parts) + ".**"


def training_resume(run_dir: Path) -> list[str] | None:
    """Resume an interrupted training from its newest last.ckpt; None (start afresh) when it saved none."""
    found = newest_last_checkpoint(run_dir)
    return ["--ckpt_path", str(found)] if found is not None else None


def search_files(scale_file: Path) -> list[Path]:
    """A search's side files (state, log, plots, config, timing), removed with its scale file on a fresh rerun."""
    from search.cli import output_paths

    paths = output_paths(scale_file)
    state = paths["state"]
    return [*(path for key, path in paths.items() if key != "scale"), state.with_name(state.name + ".timing.json")]


def search_resume(scale_file: Path) -> list[str] | None:
    """Resume an interrupted search from its state file (`--resume`); None when it wrote none yet."""
    from search.cli import output_paths

    return ["--resume"] if output_paths(scale_file)["state"].is_file() else None


def main() -> None:
    args = parse_args()
    try:
        check_out(args.out, (ROOT / args.out).resolve())
    except ValueError as err:
        raise SystemExit(f"{PROG}: {err}") from None
    out = (ROOT / args.out).resolve() if not Path(args.out).is_absolute() else Path(args.out)
    if args.loop is not None:
        run_config(args, out)
        return
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out / LOCK_NAME, f"quickstart output {out}"):
            tiny_loop(args, out)
    except (ValueError, RunLockedError) as err:
        raise SystemExit(f"{PROG}: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None


def check_search(config: loop_config.LoopConfig) -> None:
    """The search's config file and `search.args`, parsed and built as `python -m search run` does (also in a dry
    run), so a typo fails now and not after training; its model and data directory are checked elsewhere."""

    from repo_common.config_cli import ConfigParser
    from search.cli import COMMANDS
    from search.config import config_from_options

    stand_in = dict.fromkeys(loop_config.PLACEHOLDERS, "1")
    argv = ["--config", str(ROOT / config.search.config), *(loop_config.fill(a, stand_in) for a in config.search.args)]
    if "--data-dir" in argv:  # the data directory exists only on the GPU machine (`machine_problems`)
        at = argv.index("--data-dir")
        del argv[at : at + 2]
    help_text, add_options, _ = COMMANDS["run"]
    parser = ConfigParser.for_command("python -m search run", help_text)
    add_options(parser)
    try:
        config_from_options(parser, parser.parse_or_raise([*argv, "--out", "unused.json"]))
    except ValueError as err:
        raise loop_config.LoopConfigError(f"search.config / search.args: {err}") from None


def check_out(given: str, out: Path) -> None:
    """`--out` is new, empty, or an earlier quickstart's (its steps.json, or the commands.sh a run writes before
    its first step); another folder, a file or `--out ''` is refused before anything is written."""
    from repo_common.output_guard import check_output_directory, require_path

    require_path(given)
    if not (out / "commands.sh").is_file():
        check_output_directory(out, "steps.json", "a quickstart output directory")


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
    steps.step("search", "LPES search on the base model", ["search", "run", "--model", str(args.base), "--config",
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


def run_config(args: Namespace, out: Path) -> None:
    """The loop of a config file: each train method through its launcher, export, search, evaluate, report."""
    config = args.loop
    values = {
        "out": str(out), "base": config.base, "python": sys.executable, "data_dir": config.data_dir or "",
        "gpus": str(config.gpus),
    }  # fmt: skip
    problems = loop_config.machine_problems(config, ROOT, values)
    if problems and not args.dry_run:
        raise SystemExit("\n".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    try:
        with nullcontext() if args.dry_run else run_lock(out / LOCK_NAME, f"quickstart output {out}"):
            loop_steps(args, out, values, problems)
    except (ValueError, RunLockedError) as err:
        raise SystemExit(f"{PROG}: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None


def loop_steps(args: Namespace, out: Path, values: dict[str, str], problems: list[str]) -> None:
    """The loop file's steps, each skipped, resumed or rerun as OUT/steps.json says (a dry run only says which)."""
    config = args.loop
    description = f"The commands of {args.config_name}, in order."
    if args.dry_run:
        description = f"Dry run of {args.config_name}: nothing was run; <...> marks a value known only after a step."
    # every launcher starts one process per GPU (scripts/launch_train.sh, run_search.sh, run_evaluation.sh)
    environment = {"NPROC_PER_NODE": str(config.gpus)}
    run = CommandRunner(out, description=description, cwd=ROOT, dry_run=args.dry_run, env=environment)
    steps = StepRunner(run, StepLedger(out / "steps.json"), dry_run=args.dry_run)
    search_settings = load_search_config(ROOT / config.search.config)
    first_example = searched_examples(search_settings)
    given_dtype = estimates.option(config.evaluate.args, "--dtype", "auto")
    dtype = "bfloat16 (--dtype auto)" if given_dtype == "auto" else given_dtype
    on_gpus = f"{config.gpus} process{'es' * (config.gpus > 1)} on {config.gpus} GPU{'s' * (config.gpus > 1)}"
    shapes = {name: estimates.model_shape(ROOT / path) for name, path in config.train.methods.items()}
    shapes[loop_config.BASE_MODEL] = next((shape for shape in shapes.values() if shape is not None), None)

    def evaluation_cost(name: str, methods: list[str], gpus: int) -> str:
        if shapes[name] is None:
            return estimates.described(None)
        tasks, items, examples, grid = estimates.evaluation_shape(fill(config.evaluate.args))
        return estimates.described(
            estimates.evaluation_hours(shapes[name], tasks, items, examples, grid, methods, gpus)
        )

    started = time.perf_counter()

    def fill(items: list[str]) -> list[str]:
        return [loop_config.fill(item, values) for item in items]

    models = {loop_config.BASE_MODEL: config.base}
    for name, train_config in config.train.methods.items():
        run_dir = out / "runs" / name
        steps.step(f"train-{name}", f"train {name}", [*fill(config.train.launcher), train_config,
                   "--trainer.default_root_dir", str(run_dir), "--model.init_from", config.base,
                   *fill(config.train.args)], inputs=[ROOT / train_config, ROOT / config.base], outputs=[run_dir],
                   resume=lambda d=run_dir: training_resume(d), resources=f"{on_gpus}, " + estimates.described(
                       estimates.training_hours(ROOT / train_config, fill(config.train.args), config.gpus)))  # fmt: skip
        checkpoint = f"<last.ckpt under {run_dir}>" if args.dry_run else str(last_checkpoint(run_dir))
        models[name] = str(out / "models" / name)
        steps.step(f"export-{name}", f"export the {name} checkpoint", ["repo_train", "export", "--checkpoint",
                   checkpoint, "--out", models[name], "--tokenizer", config.base], module=True,
                   inputs=[checkpoint, ROOT / config.base], outputs=[Path(models[name])],
                   after=[f"train-{name}"], resources="1 process on the CPU")  # fmt: skip

    scale_file = out / "scales" / f"{config.search.model}.json"
    searched = ROOT / models[config.search.model]
    model_step = {name: [f"export-{name}"] for name in config.train.methods} | {loop_config.BASE_MODEL: []}
    search_shape = shapes[config.search.model]
    search_cost = estimates.described(
        None if search_shape is None else estimates.search_hours(search_shape, search_settings, config.gpus)
    )
    steps.step("search", f"LPES search on the {config.search.model} model", [*fill(config.search.launcher),
               "--model", models[config.search.model], "--config", config.search.config, "--out", str(scale_file),
               *fill(config.search.args)], inputs=[searched, ROOT / config.search.config], outputs=[scale_file],
               related=search_files(scale_file), resume=lambda: search_resume(scale_file),
               after=model_step[config.search.model], resources=f"{on_gpus}, {search_cost}")  # fmt: skip
    values["scale_file"] = str(scale_file)
    mean = f"<mean of the scales in {scale_file}>" if args.dry_run else f"{loop_config.mean_scale(scale_file):.6g}"
    values["mean_scale"] = mean

    eval_dirs, evaluations = {}, []
    at_once = config.evaluate.at_once
    slots = gpu_slots(config.gpus, at_once, visible_devices()) if at_once > 1 else [{}]
    for name, methods in config.evaluate.methods.items():
        eval_dirs[name] = out / "eval" / name
        filled = fill(methods)
        method_args = [arg for method in filled for arg in ("--method", method)]
        searched_methods = any(str(scale_file) in method for method in filled)
        where = on_gpus if at_once == 1 else evaluation_slot(config.gpus, at_once, len(evaluations) % at_once)
        evaluations.append(dict(key=f"eval-{name}", title=f"evaluate the {name} model", argv=[
            *fill(config.evaluate.launcher), "--model", models[name], *fill(config.evaluate.args), "--example-offset",
            str(first_example), *method_args, "--out", str(eval_dirs[name])], inputs=[ROOT / models[name]],
            outputs=[eval_dirs[name]], resume=list,
            resources=f"{where}, {dtype}, {evaluation_cost(name, filled, config.gpus // at_once)}",
            after=[*model_step[name], *(["search"] if searched_methods else [])]))  # fmt: skip
    steps.together(evaluations, slots, logs=out / "logs")
    first, *others = eval_dirs.values()
    if others:
        run("one plot: every evaluated model and method", "evaluation", "report", "--out", str(first),
            *(arg for other in others for arg in ("--compare", str(other))))  # fmt: skip
    if args.dry_run:
        print_plan(steps.decisions)
        print(question_ranges(search_settings, config.evaluate.args, first_example), flush=True)
        print(f"\ndry run: nothing was run; the commands are in {run.script}", flush=True)
        for problem in problems:
            print(f"warning: a real run here would stop at once: {problem}", file=sys.stderr)
        return
    write_report(out, run, eval_dirs, time.perf_counter() - started, *config_report_parts(out, args, config,
                 eval_dirs, scale_file, models))  # fmt: skip
    print(f"\nreport: {out / 'README.md'}")


def evaluation_slot(gpus: int, at_once: int, slot: int) -> str:
    """The plan's 'runs on' of an evaluation that shares the node: its processes and GPU slice (the slot it takes
    first; a later evaluation takes whichever slot frees first)."""
    size = gpus // at_once
    first = slot * size
    devices = f"GPU {first}" if size == 1 else f"GPUs {first}-{first + size - 1}"
    return f"{size} process{'es' * (size > 1)} on {devices} ({at_once} evaluations at once)"


def load_search_config(path: Path):
    from search.config import load_config

    return load_config(path)


def searched_examples(search) -> int:
    """How many source examples the search uses from the start of its data (fitness, then held-out): every
    evaluation starts after them (`--example-offset`), so no number of the report is measured on them; the
    evaluation also checks the scale file's record of them (`evaluation.search_overlap`)."""
    held = search.held_out
    return max(search.task.num_examples, search.held_out_start + held.num_examples if held.num_examples else 0)


def question_ranges(search, evaluate_args: list[str], first: int) -> str:
    """Which source examples each step uses: the search's fitness and held-out ranges, then the evaluations'."""
    held, held_start = search.held_out, search.held_out_start
    count = int(estimates.option(evaluate_args, "--num-examples", "0") or 0)
    evaluated = f"{first}-{first + count - 1}" if count else f"from {first} on"
    held_part = f", held-out {held_start}-{held_start + held.num_examples - 1}" if held.num_examples else ""
    return (
        f"examples: the search uses {search.task.name} fitness 0-{search.task.num_examples - 1}{held_part} "
        f"(seed {search.task.seed}); every evaluation uses {evaluated} (--example-offset {first}), and refuses "
        "a scale file on its search's examples"
    )


def print_plan(decisions) -> None:
    """The dry run's plan: per step, what a real run would do with it, on what, and why."""
    print("\nplan (OUT/steps.json decides on each run: done steps are skipped, interrupted ones resumed):")
    rows = [("step", "action", "runs on", "why"), *((t, d.action, r, d.reason) for t, d, r in decisions)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  " + "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + f"  {row[3]}")


def results_table(eval_dirs: dict[str, Path]) -> list[str]:
    """Per (model, method, task): accuracy, middle, edges, Δ vs that model's baseline overall and in the middle,
    each with its 95% CI and Holm-adjusted p, and the verdict words computed from them (docs/evaluation.md)."""
    from evaluation.method_labels import short_labels
    from evaluation.report import delta_cell, interval_cell, p_cell
    from evaluation.results import comparison_verdict

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
        "```bash",
        "python scripts/quickstart.py --config configs/quickstart/olmo2-1b.yaml --dry-run   # the whole loop; or:",
        "scripts/launch_train.sh configs/train/olmo2-1b-stage2-repo.yaml        # and -rope; see docs/training.md",
        "python -m repo_train export --checkpoint <ckpt> --out hf/olmo2-1b-repo --tokenizer <olmo2 dir>",
        "scripts/run_search.sh --model <hf dir> --task kv --config configs/search/lpes.yaml --out scales/NAME.json",
        "python -m evaluation run --model <hf dir> --tasks mdqa,kv --data-dir data/lost_in_the_middle --example-offset 700 \\",
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
