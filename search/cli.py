"""`python -m search`: run an LPES search (`run`) or check and print a scale file (`show`).

`run` writes, next to `--out scales/NAME.json`:

    NAME.json          the scale file (search/scale_file.py), what evaluation applies
    NAME.log.jsonl     one line per generation: best, mean, diversity, time, ...
    NAME.curve.png     the per-layer scales with the control points
    NAME.fitness.png   fitness over generations
    NAME.state.json    the GA state after every generation (`--resume` continues it)
    NAME.lock          while the search runs: its pid and host (repo_train/run_lock.py); a second
                       search with the same --out is refused until this one ends

Under torchrun every rank loads the model and runs the same GA; the fitness
splits the prompts across ranks (search/harness_fitness.py) and only rank 0
writes files. User mistakes end with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from repo_train.argtypes import non_negative_int, positive_int
from repo_train.cli_errors import OneLineArgumentParser, report_user_errors

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_NQ = REPO_ROOT / "tests" / "fixtures" / "lost_in_the_middle" / "nq-open-oracle.first40.jsonl.gz"

EPILOG = """\
configs: configs/search/lpes.yaml (paper defaults), lpes-vicuna-mdqa10.yaml (32 layers, 10 MDQA documents),
  lpes-qwen-kv50.yaml (28 layers, 50 KV pairs), tiny.yaml (the tiny random model, seconds on a CPU).
  Without --config: the paper defaults with --model, tiny.yaml without.
data: mdqa reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release; without a data dir, the
  40-question test fixture); kv reads DATA_DIR/kv-retrieval-<k>_keys.jsonl(.gz) or generates UUID pairs.
distributed: python -m torch.distributed.run --nproc_per_node=N -m search run ...  (scripts/run_search.sh)
resume: rerun the same command with --resume; it continues NAME.state.json (or starts if there is none).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m search",
        description="LPES: search one RoPE scaling factor per layer of a frozen model with a Bézier-constrained "
        "genetic algorithm scored by the evaluation harness, and write a scale file.",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser(
        "run", help="run (or resume) a search", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    run.add_argument("--model", help="local HF model directory (default: the built-in tiny random model)")
    run.add_argument("--task", choices=["mdqa", "kv"], help="search task (default: the config's)")
    run.add_argument("--config", help="YAML search config (see below)")
    run.add_argument("--out", required=True, help="scale file to write, e.g. scales/NAME.json")
    run.add_argument("--resume", action="store_true", help="continue NAME.state.json if it exists")
    run.add_argument("--num-examples", type=positive_int, help="source examples per subset (config: task)")
    run.add_argument("--num-items", type=positive_int, help="documents (mdqa) or KV pairs (kv) per prompt")
    run.add_argument("--generations", type=non_negative_int, help="breeding rounds after generation 0")
    run.add_argument("--seed", type=int, help="seed of the GA")
    run.add_argument("--data-dir", help="folder with the Lost in the Middle files")
    run.add_argument("--no-progress", action="store_true", help="no progress bar over candidates")
    show = sub.add_parser("show", help="validate a scale file and print it")
    show.add_argument("scale_file", metavar="SCALE_FILE")
    show.add_argument("--num-layers", type=positive_int, help="also check it against a model with this many layers")
    diagnose = sub.add_parser(
        "diagnose",
        help="structure deviation D and smoothness S of a scale file and its variants (search/structure.py)",
        description="D per layer and S of the searched scales and of uniform / noisy / shuffled / random variants, "
        "on the search set of the config's task; writes OUT/structure.json and OUT/structure.png.",
    )
    diagnose.add_argument("--scale-file", required=True, help="scale file written by `python -m search run`")
    diagnose.add_argument("--out", required=True, help="directory for structure.json and structure.png")
    diagnose.add_argument("--model", help="local HF model directory (default: the built-in tiny random model)")
    diagnose.add_argument("--config", help="YAML search config: its model and task sections (default as for run)")
    diagnose.add_argument("--task", choices=["mdqa", "kv"], help="task of the prompts (default: the config's)")
    diagnose.add_argument("--num-examples", type=positive_int, help="source examples, 3 prompts each (config: task)")
    diagnose.add_argument("--num-items", type=positive_int, help="documents (mdqa) or KV pairs (kv) per prompt")
    diagnose.add_argument("--data-dir", help="folder with the Lost in the Middle files")
    diagnose.add_argument(
        "--seed", type=int, default=0, dest="variant_seed", metavar="SEED", help="seed of noisy/shuffled/random"
    )
    diagnose.set_defaults(generations=None, seed=None)  # the `run` options resolve_config reads
    return parser


def output_paths(out: str | Path) -> dict[str, Path]:
    """The files of one search, from the scale-file path NAME.json."""
    out = Path(out)
    if out.suffix != ".json":
        raise ValueError(f"--out must name a .json scale file (e.g. scales/NAME.json), got {str(out)!r}")
    stem = out.with_suffix("")
    return {
        "scale": out,
        "log": stem.with_name(stem.name + ".log.jsonl"),
        "curve": stem.with_name(stem.name + ".curve.png"),
        "fitness": stem.with_name(stem.name + ".fitness.png"),
        "state": stem.with_name(stem.name + ".state.json"),
    }


def lock_path(out: str | Path) -> Path:
    """The lock file of the search writing `out` (NAME.json -> NAME.lock), held by rank 0 while it runs."""
    out = Path(out)
    return out.with_name(out.with_suffix("").name + ".lock")


def resolve_config(args: argparse.Namespace):
    """The search config: the file (or a default) with the command-line overrides applied."""
    from search.config import SearchConfig, load_config

    if args.config:
        config = load_config(args.config)
    elif args.model is None:
        config = SearchConfig.tiny()
        print(
            "no --model and no --config: the built-in tiny random model with configs/search/tiny.yaml", file=sys.stderr
        )
    else:
        config = SearchConfig()
    task = {"name": args.task, "num_examples": args.num_examples, "num_items": args.num_items}
    task["data_dir"] = args.data_dir
    task = {k: v for k, v in task.items() if v is not None}
    ga = {k: v for k, v in {"generations": args.generations, "seed": args.seed}.items() if v is not None}
    model = {"path": args.model} if args.model is not None else {}
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, **model),
        task=dataclasses.replace(config.task, **task),
        ga=dataclasses.replace(config.ga, **ga),
    )


def task_parameters(task) -> dict[str, Any]:
    """`build_task` parameters of the search task (data file, k); gold positions etc. are the fitness's."""
    data_dir = Path(task.data_dir) if task.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise FileNotFoundError(f"data dir {str(data_dir)!r} is not a directory")
    if task.name == "mdqa":
        matches = sorted(data_dir.glob("nq-open-oracle*.jsonl*")) if data_dir else [FIXTURE_NQ]
        if not matches or not matches[0].is_file():
            where = f"in {str(data_dir)!r}" if data_dir else "(and the test fixture is missing)"
            raise FileNotFoundError(f"mdqa needs an nq-open-oracle*.jsonl(.gz) file {where}: pass --data-dir")
        if data_dir is None:
            print(
                f"mdqa without a data dir: the 40-question test fixture {FIXTURE_NQ.name} (a smoke test)",
                file=sys.stderr,
            )
        return {"path": str(matches[0].resolve()), "num_documents": task.num_items}
    matches = sorted(data_dir.glob(f"kv-retrieval-{task.num_items}_keys.jsonl*")) if data_dir else []
    params = {"path": str(matches[0].resolve()) if matches else None, "num_keys": task.num_items}
    if task.key_chars is not None:
        if params["path"] is not None:
            raise ValueError("task.key_chars shortens generated keys; it cannot apply to a release file")
        params["key_chars"] = task.key_chars
    if task.template != "json":
        params["template"] = task.template  # checked by the kv task (pairs needs key_chars)
    if task.distinct_keys is not None:
        params["distinct_keys"] = task.distinct_keys  # checked by the kv task (pairs only)
    return params


def decode_settings(task) -> Any:
    """`DecodeSettings` of a search task: the config's budget and batch, the harness task's stop strings."""
    from evaluation.generation import DecodeSettings
    from evaluation.runner import task_generation

    _, stops = task_generation(task.name, {**task_parameters(task), "num_examples": 1})
    return DecodeSettings(
        max_new_tokens=task.max_new_tokens,
        stop_strings=stops,
        batch_size=task.batch_size,
        max_length=task.max_length,
        truncate=task.truncate,
    )


def load_search_model(model_config):
    """Model and tokenizer on the right device: a local directory, or the tiny default."""
    from evaluation.models import load_model, place_model, tiny_default

    if model_config.path is None:
        model, tokenizer = tiny_default(model_config.seed)
    else:
        model, tokenizer = load_model(Path(model_config.path), model_config.dtype, model_config.attn_implementation)
    return place_model(model, model_config.device), tokenizer


def run_search(config, out: str | Path, *, resume: bool = False, fitness_cls=None, progress: bool = False):
    """The whole search (torchrun-ready): fitness, GA with log, held-out check, scale file, plots.

    Returns a summary dict. `fitness_cls` replaces `HarnessFitness` (tests use a scorer with varied values).
    """
    from repo_train.run_lock import run_lock
    from search.harness_fitness import HarnessFitness, barrier, init_distributed, rank_and_world

    started = init_distributed()
    try:
        # rank 0 owns the outputs; if it is refused, it exits and torchrun stops the other ranks
        owner = run_lock(lock_path(out), f"search output {out}") if rank_and_world()[0] == 0 else nullcontext()
        with owner:
            summary = _run_search(config, out, resume, fitness_cls or HarnessFitness, progress)
            barrier()  # no rank leaves before rank 0 has written the files
        return summary
    finally:
        if started:
            import torch.distributed as dist

            dist.destroy_process_group()


def _run_search(config, out, resume, fitness_cls, progress) -> dict[str, Any]:
    from repo_train.modeling.scaling import current_policies
    from search.ga import run
    from search.harness_fitness import check_held_out_available, evaluate_held_out, model_fingerprint, rank_and_world
    from search.search_log import search_with_log

    rank, _ = rank_and_world()
    paths = output_paths(out)
    if paths["state"].exists() and not resume:
        raise ValueError(f"{paths['state']} exists: pass --resume to continue that search, or delete it to start over")
    if paths["state"].exists():
        from search.ga import SearchState

        SearchState.load(paths["state"])  # a truncated or corrupt state fails before the model is loaded
    wall = time.perf_counter()
    model, tokenizer = load_search_model(config.model)
    num_layers = len(current_policies(model))
    if config.model.num_layers is not None and config.model.num_layers != num_layers:
        raise ValueError(
            f"the config is for a {config.model.num_layers}-layer model, but the model has {num_layers} layers: "
            "pass --model the model it was written for, or another config"
        )
    task = config.task
    settings = decode_settings(task)
    params = task_parameters(task)
    fitness = fitness_cls(
        model,
        tokenizer,
        task.name,
        params,
        num_examples=task.num_examples,
        seed=task.seed,
        weights=config.weights,
        settings=settings,
        progress=progress,
    )
    held = config.held_out
    held_offset = task.num_examples if held.offset is None else held.offset
    held_seed = task.seed if held.seed is None else held.seed
    if held.num_examples > 0:  # a data file too small for it fails now, not after the search
        check_held_out_available(
            task.name, params, num_examples=held.num_examples, example_offset=held_offset, seed=held_seed
        )
    space = config.space.build(num_layers)
    echo = print if rank == 0 else (lambda *a, **k: None)
    echo(
        f"LPES search: {num_layers} layers, {space.curve} curve with {space.num_points} points, "
        f"{task.name} k={task.num_items}, {len(fitness.example_ids)} examples × 3 subsets "
        f"({len(fitness.prepared.rows)} prompts), population {config.ga.population}, "
        f"{config.ga.generations} generations, seed {config.ga.seed}"
    )
    if rank == 0:
        result = search_with_log(space, fitness, config.ga, paths["state"], paths["log"], resume, echo)
    else:
        state = paths["state"] if resume else None  # other ranks read rank 0's state only to resume
        result = run(space, fitness, config.ga, context=fitness.context, state_path=state, resume=resume, save=False)

    held_out = None
    if held.num_examples > 0:
        held_out = evaluate_held_out(
            model,
            tokenizer,
            task.name,
            params,
            result.scales,
            num_examples=held.num_examples,
            example_offset=held_offset,
            seed=held_seed,
            weights=config.weights,
            settings=settings,
            exclude_example_ids=fitness.example_ids,
            fitness_cls=fitness_cls,
        )
    summary = {"fitness": result.fitness.to_json(), "generations": result.generations, "held_out": held_out}
    summary.update(scales=result.scales, evaluations=result.evaluations, paths={k: str(v) for k, v in paths.items()})
    if rank == 0:
        name = str(config.model.path) if config.model.path else model.name_or_path
        model_record = {"name": name, **model_fingerprint(model)}
        summary["wall_time_s"] = _write_outputs(config, space, fitness, result, paths, model_record, held_out)
        _print_summary(summary, time.perf_counter() - wall)
    return summary


def _write_outputs(config, space, fitness, result, paths, model_record, held_out) -> float:
    from search.diagnostics import smoothness
    from search.plots import plot_curve, plot_fitness
    from search.scale_file import ScaleFile, search_section, write_scale_file
    from search.search_log import read_log

    timing_file = paths["state"].with_name(paths["state"].name + ".timing.json")
    wall_time = json.loads(timing_file.read_text())["wall_s"] if timing_file.is_file() else 0.0
    extra = {
        "task": fitness.describe(),
        "context": fitness.context,
        "evaluations": result.evaluations,
        "stopped_early": result.generations < config.ga.generations,
        "smoothness": smoothness(result.scales) if len(result.scales) >= 3 else None,
        "held_out": held_out,
        "run_config": config.to_dict(),
    }
    section = search_section(config.ga, config.weights, fitness.data_sha256, result.generations, wall_time, **extra)
    scale_file = ScaleFile.from_genome(space, result.best, result.fitness, model_record, section)
    write_scale_file(paths["scale"], scale_file)
    title = f"{model_record['name']} · {fitness.task} k={config.task.num_items}"
    plot_curve(paths["curve"], scale_file.to_json(), title=f"LPES scales · {title}")
    plot_fitness(paths["fitness"], read_log(paths["log"]), title=f"LPES search · {title}")
    return wall_time


def _fmt(result: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.3f}" for k, v in result["per_subset"].items())
    return f"{result['overall']:.4f} ({parts})"


def _print_summary(summary: dict[str, Any], seconds: float) -> None:
    scales = summary["scales"]
    print(f"best fitness {_fmt(summary['fitness'])} after {summary['generations']} generations")
    print(f"scales: {' '.join(f'{s:.3f}' for s in scales)}  (mean {sum(scales) / len(scales):.3f})")
    held = summary["held_out"]
    if held:
        print(f"held-out ({held['num_examples']} examples, offset {held['example_offset']}, seed {held['seed']}):")
        print(f"  baseline       {_fmt(held['baseline'])}")
        print(f"  pi:scale={held['pi_mean']['scale']:.3f}  {_fmt(held['pi_mean'])}")
        print(f"  lpes           {_fmt(held['lpes'])}")
    print(f"{summary['evaluations']} candidates scored; this run took {seconds:.1f} s")
    for key in ("scale", "log", "curve", "fitness", "state"):
        print(f"{key:8s} {summary['paths'][key]}")


def show(path: str, num_layers: int | None) -> int:
    """Validate a scale file and print what it holds."""
    from search.scale_file import load_scale_file

    data = load_scale_file(path, expected_num_layers=num_layers)
    scales = data.scales
    mean = sum(scales) / len(scales)
    curve = data.curve
    print(f"scale file {path}: valid (format_version {data.format_version})")
    print(f"model      {data.model['name']} (config sha256 {data.model['config_sha256'][:16]}…)")
    degree = f", degree {curve['degree']}" if curve["degree"] is not None else ""
    print(f"curve      {curve['type']}{degree}; control points {[tuple(p) for p in data.control_points]}")
    print(f"scales     {' '.join(f'{s:.3f}' for s in scales)}  ({data.num_layers} layers, mean {mean:.4g})")
    print(f"fitness    {_fmt(data.fitness)}")
    search = data.search
    print(
        f"search     seed {search['seed']}, {search['generations']} generations, "
        f"{search.get('evaluations', '?')} candidates, {search['wall_time_s']:.1f} s, weights {search['weights']}"
    )
    held = search.get("held_out")
    if held:
        print(f"held-out   baseline {_fmt(held['baseline'])}")
        print(f"           pi:scale={held['pi_mean']['scale']:.4g} {_fmt(held['pi_mean'])}")
        print(f"           lpes     {_fmt(held['lpes'])}")
    from evaluation.models import TINY_DEFAULT_NAME

    model = "" if data.model["name"].startswith(TINY_DEFAULT_NAME) else f"--model {data.model['name']} "
    flags = " ".join(shlex.quote(flag) for flag in evaluation_task_flags(search["task"]))
    print(
        f"evaluate   python -m evaluation run {model}{flags} --method baseline "
        f"--method lpes:scale_file={path} --method pi:scale={mean:.6g} --out DIR"
    )
    print("           (the search's own task; for prompts it did not see, change --seed or see docs/search.md)")
    return 0


def evaluation_task_flags(task: Mapping[str, Any]) -> list[str]:
    """`python -m evaluation run` flags that rebuild a scale file's search task, gold at every position.

    Every build parameter goes through --task-param (it overrides the CLI's
    defaults), so generated and release-file tasks come back the same.
    """
    name, params = task["task"], task["params"]
    flags = ["--tasks", name, "--num-examples", str(task["num_examples"]), "--seed", str(params.get("seed", 0))]
    flags += ["--gold-positions", "all"]
    for key, value in params.items():
        if key not in ("seed", "gold_positions", "num_examples") and value is not None:
            flags += ["--task-param", f"{name}:{key}={value}"]
    return flags


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    # user mistakes (ConfigError, ScaleFileError are ValueErrors): one clear line, no traceback
    return report_user_errors(f"python -m search {args.command}", lambda: _command(args), (ValueError, OSError))


def _command(args: argparse.Namespace) -> int:
    """Run the parsed subcommand; its exit code."""
    if args.command == "show":
        return show(args.scale_file, args.num_layers)
    if args.command == "diagnose":
        from search.structure import diagnose

        diagnose(resolve_config(args), args.scale_file, args.out, seed=args.variant_seed)
        return 0
    output_paths(args.out)  # a bad --out fails before anything is loaded
    if args.model is not None and not Path(args.model).is_dir():
        raise FileNotFoundError(f"--model {args.model!r} is not a directory; pass a local HF model directory")
    run_search(resolve_config(args), args.out, resume=args.resume, progress=not args.no_progress)
    return 0
