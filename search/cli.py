"""`python -m search`: run an LPES search (`run`) or check and print a scale file (`show`).

`run` writes, next to `--out scales/NAME.json`:

    NAME.json          the scale file (search/scale_file_writer.py), what evaluation applies
    NAME.log.jsonl     one line per generation: best, mean, diversity, time, ...
    NAME.curve.png     the per-layer scales with the control points
    NAME.fitness.png   fitness over generations
    NAME.state.json    the GA state after every generation (`--resume` continues it)
    NAME.lock          while the search runs: its pid and host (repo_common/run_lock.py); a second
                       search with the same --out is refused until this one ends

Under torchrun every rank loads the model and runs the same GA; the fitness
splits the prompts across ranks (search/harness_fitness.py) and only rank 0
writes files. User mistakes end with one line on stderr and exit code 2.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common import user_code
from repo_common.config_cli import ConfigParser, dispatch, dump_config
from repo_common.model_directory import check_model_directory  # stdlib only: fast
from repo_common.output_guard import check_output_file, check_parents, require_path  # stdlib only: fast
from search.config import add_run_command, add_search_sections, config_from_options

EPILOG = """\
configs: configs/search/lpes.yaml (paper defaults), lpes-vicuna-mdqa10.yaml (32 layers, 10 MDQA documents),
  lpes-qwen-kv50.yaml (28 layers, 50 KV pairs), tiny.yaml (the tiny random model, seconds on a CPU).
  Without --config: the paper defaults with --model, tiny.yaml without. Any key can be set on the command line too (--ga.population 12, --task.num_items 10);
  --print_config prints the resolved config, which the search also writes as NAME.config.yaml
  (--config NAME.config.yaml replays it). docs/configuring.md.
short flags: --model DIR = --model.path, --task = --task.name, --num-examples = --task.num_examples,
  --num-items = --task.num_items, --data-dir = --task.data_dir, --generations = --ga.generations,
  --seed = --ga.seed.
data: mdqa reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release; without a data dir, the
  packaged 40-question sample in evaluation/data/lost_in_the_middle); kv reads
  DATA_DIR/kv-retrieval-<k>_keys.jsonl(.gz) or generates UUID pairs.
distributed: python -m torch.distributed.run --nproc_per_node=N -m search run ...  (scripts/run_search.sh)
resume: rerun the same command with --resume; it continues NAME.state.json (or starts if there is none).
"""


def _add_run(parser: ConfigParser) -> None:
    parser.epilog = EPILOG
    add_run_command(parser, out_required=True)  # the parser `search.config.search_parser` builds for the API


def _run(options: Namespace, parser: ConfigParser) -> int:
    if options.out is not None or not options.print_config:  # --print_config alone prints `out: null` to fill in
        check_search_outputs(options.out, options.resume)  # a bad or foreign --out fails before anything is loaded
    config = config_from_options(parser, options)
    if config.model.path is None:  # --model.dtype / attn_implementation would be ignored by the tiny default
        from evaluation.run_config import check_tiny_default_options  # lazy: keeps --help fast

        check_tiny_default_options(config.model.dtype, config.model.attn_implementation, "--model.")
    if getattr(parser, "tiny_defaults", False):
        print(
            "no --model and no --config: the built-in tiny random model with configs/search/tiny.yaml", file=sys.stderr
        )
    model = config.model.path
    if model is not None:
        check_model_directory("--model", model)  # a hub id gets the download hint
    imports = list(options.get(user_code.KEY) or [])  # the user's modules (a task): a replay imports them first
    text = dump_config(
        {
            **({user_code.KEY: imports} if imports else {}),
            **config.to_dict(),
            "out": options.out,
            "resume": options.resume,
            "no_progress": options.no_progress,
        }
    )
    if options.print_config:
        print(text, end="")
        return 0
    run_search(config, options.out, resume=options.resume, progress=not options.no_progress, config_text=text)
    return 0


def _add_diagnose(parser: ConfigParser) -> None:
    parser.description = (
        "D per layer and S of the searched scales and of uniform / noisy / shuffled / random variants, on the "
        "search set of the config's task; writes OUT/structure.json and OUT/structure.png (search/structure.py)."
    )
    add_search_sections(parser)
    parser.add_import_option()  # a user's task, as in run
    parser.flag_aliases.update({"--seed": "--variant_seed", "--scale-file": "--scale_file"})
    parser.add_argument("--scale_file", type=str, required=True, help="a scale file of `python -m search run`")
    parser.add_argument("--out", type=str, required=True, help="directory for structure.json and structure.png")
    parser.add_argument("--variant_seed", type=int, default=0, help="seed of noisy/shuffled/random (also --seed)")


def _diagnose(options: Namespace, parser: ConfigParser) -> int:
    from search.structure import diagnose  # lazy: keeps --help fast

    diagnose(config_from_options(parser, options), options.scale_file, options.out, seed=options.variant_seed)
    return 0


def _add_show(parser: ConfigParser) -> None:
    parser.add_argument("scale_file", type=str, help="the scale file")
    parser.add_argument("--num_layers", "--num-layers", type=PositiveInt | None, help="also check the layer count")


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
        "config": stem.with_name(stem.name + ".config.yaml"),
    }


def check_search_outputs(out: str | Path, resume: bool) -> dict[str, Path]:
    """The files of the search writing `out`, refused (`repo_common.output_guard`) unless each is missing or this
    search's own: with `--resume` and NAME.state.json every file is the search's; without a state file only
    NAME.config.yaml of the same `--out` may be there (a search killed before its first generation). Reads only."""
    paths = output_paths(require_path(out))
    # its folder exists or can be made, and can be written: refused now, not after the model load and a generation
    check_parents(paths["scale"], fix="nothing was written; pass an --out inside a directory (e.g. scales/NAME.json)")
    if paths["state"].is_file():
        if not resume:
            raise ValueError(
                f"{paths['state']} exists: pass --resume to continue that search, or delete it to start over"
            )
        return paths
    advice = "pass another --out, or delete it if that earlier search is no longer needed"
    for key in ("scale", "log", "curve", "fitness", "config"):
        ours = key == "config" and _own_config(paths["config"], paths["scale"])
        what = "an output" if key != "scale" else "the scale file"
        check_output_file(paths[key], f"{what} of a search that can continue (no {paths['state'].name})",
                          ours=ours, fix=advice)  # fmt: skip
    return paths


def _own_config(path: Path, scale: Path) -> bool:
    """True if `path` is the NAME.config.yaml a search into `scale` wrote (its `out` names that file)."""
    import yaml  # lazy: keeps --help fast

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(data, dict) or not {"ga", "task", "out"} <= set(data):
        return False
    return Path(str(data["out"])).resolve() == scale.resolve()


def lock_path(out: str | Path) -> Path:
    """The lock file of the search writing `out` (NAME.json -> NAME.lock), held by rank 0 while it runs."""
    out = Path(out)
    return out.with_name(out.with_suffix("").name + ".lock")


def run_search(
    config, out: str | Path, *, resume: bool = False, fitness_cls=None, progress: bool = False, config_text=None
):
    """The whole search (torchrun-ready): fitness, GA with log, held-out check, scale file, plots.

    Returns a summary dict. `fitness_cls` replaces `HarnessFitness` (tests use a scorer with varied values).
    `config_text`, the command's resolved configuration, is written as NAME.config.yaml once the model and
    task are checked (`--config NAME.config.yaml` replays the search).
    """
    from repo_common.distributed import (  # lazy: keeps --help fast
        barrier,
        close_distributed,
        init_distributed,
        rank_and_world,
    )
    from repo_common.run_lock import run_lock  # lazy: keeps --help fast
    from repo_common.launcher_watch import watch_launcher  # lazy: keeps --help fast
    from search.harness_fitness import HarnessFitness  # lazy: keeps --help fast

    watch_launcher()  # a torchrun worker ends when its launcher is gone
    started = init_distributed()
    try:
        # rank 0 owns the outputs; if it is refused, it exits and torchrun stops the other ranks
        owner = run_lock(lock_path(out), f"search output {out}") if rank_and_world()[0] == 0 else nullcontext()
        with owner:
            summary = _run_search(config, out, resume, fitness_cls or HarnessFitness, progress, config_text)
            barrier()  # no rank leaves before rank 0 has written the files
        return summary
    finally:
        close_distributed(started)


def _run_search(config, out, resume, fitness_cls, progress, config_text) -> dict[str, Any]:
    from repo_common.atomic import write_text_atomic  # lazy: keeps --help fast
    from repo_common.distributed import rank_and_world  # lazy: keeps --help fast
    from repo_train.modeling.swapping import current_policies  # lazy: keeps --help fast
    from search.ga import run  # lazy: keeps --help fast
    from search.harness_fitness import (  # lazy: keeps --help fast
        check_held_out_available,
        evaluate_held_out,
        model_fingerprint,
    )
    from search.prepare import (  # heavy: keeps --help fast
        load_search_model,
        search_fitness,
        searched_model,
        task_parameters,
    )
    from search.search_log import search_with_log  # lazy: keeps --help fast

    rank, _ = rank_and_world()
    paths = check_search_outputs(out, resume)  # also for a search started from Python
    if paths["state"].exists():
        from search.ga import SearchState  # lazy: keeps --help fast

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
    fitness = search_fitness(
        task, model, tokenizer, fitness_cls, weights=config.weights, progress=progress, score=task.score
    )
    params = task_parameters(task)  # the held-out set's: the same task and data file
    held = config.held_out
    held_offset = config.held_out_start
    held_seed = task.seed if held.seed is None else held.seed
    if held.num_examples > 0:  # a data file too small for it fails now, not after the search
        check_held_out_available(
            task.name, params, num_examples=held.num_examples, example_offset=held_offset, seed=held_seed
        )
    space = config.space.build(num_layers)
    if resume and paths["state"].exists():  # a state the GA would refuse leaves NAME.config.yaml as it was
        from search.ga import _resume  # lazy: keeps --help fast

        _resume(paths["state"], space, config.ga, getattr(fitness, "context", ""))
    if rank == 0 and config_text is not None:
        write_text_atomic(paths["config"], config_text)
    # Flushed: stdout to a file is block-buffered, and a log must show each generation when it ends.
    echo = functools.partial(print, flush=True) if rank == 0 else (lambda *a, **k: None)
    echo(
        f"LPES search: {num_layers} layers, {space.curve} curve with {space.num_points} points, "
        f"{task.name} k={task.num_items}, {len(fitness.example_ids)} examples × 3 subsets "
        f"({len(fitness.prepared.rows)} prompts), population {config.ga.population}, "
        f"{config.ga.generations} generations, seed {config.ga.seed}"
        + (f", {config.ga.racing.describe(fitness.num_questions)}" if config.ga.racing else "")
    )
    notice = config.ga.racing.first_stage_notice(fitness.num_questions) if config.ga.racing else None
    if notice:
        echo(f"notice: {notice}")
    if rank == 0:
        result = search_with_log(space, fitness, config.ga, paths["state"], paths["log"], resume, echo)
    else:
        state = paths["state"] if resume else None  # other ranks read rank 0's state only to resume
        result = run(space, fitness, config.ga, context=fitness.context, state_path=state, resume=resume, save=False)

    # the model unscaled on the same search set: the line every generation's fitness is read against
    unscaled = fitness.evaluate([[1.0] * num_layers])[0]
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
            settings=fitness.settings,
            exclude_example_ids=fitness.example_ids,
            fitness_cls=fitness_cls,
            prompt_format=task.prompt_format,
            score=task.score,
        )
    summary = {"fitness": result.fitness.to_json(), "generations": result.generations, "held_out": held_out}
    summary["unscaled_fitness"] = unscaled.to_json()
    summary.update(scales=result.scales, evaluations=result.evaluations, paths={k: str(v) for k, v in paths.items()})
    if rank == 0:
        name = str(config.model.path) if config.model.path else model.name_or_path
        model_record = {"name": name, **model_fingerprint(model), **searched_model(config.model, model)}
        summary["wall_time_s"] = _write_outputs(config, space, fitness, result, paths, model_record, held_out, unscaled)
        _print_summary(summary, time.perf_counter() - wall)
    return summary


def examples_used(config, fitness, held_out, held_fingerprints) -> dict[str, Any]:
    """The source examples the search used, for `evaluation.search_overlap`: its fitness and held-out ranges
    (as the report names them) and every one of their examples' content fingerprints."""
    ranges = {"fitness": {"example_offset": 0, "num_examples": len(fitness.example_ids), "seed": config.task.seed}}
    if held_out is not None:
        ranges["held_out"] = {key: held_out[key] for key in ("example_offset", "num_examples", "seed")}
    return {
        "task": fitness.task,
        **ranges,
        "fingerprints": sorted({*fitness.source_fingerprints(), *held_fingerprints}),
    }


def _write_outputs(config, space, fitness, result, paths, model_record, held_out, unscaled) -> float:
    from search.plots import plot_curve, plot_fitness  # lazy: keeps --help fast
    from search.scale_file_writer import ScaleFile, search_section, write_scale_file  # lazy: keeps --help fast
    from search.search_log import read_log  # lazy: keeps --help fast
    from search.smoothness import smoothness  # lazy: keeps --help fast

    timing_file = paths["state"].with_name(paths["state"].name + ".timing.json")
    wall_time = json.loads(timing_file.read_text())["wall_s"] if timing_file.is_file() else 0.0
    held_fingerprints = (held_out or {}).pop("source_fingerprints", [])
    extra = {
        "task": fitness.describe(),
        "examples_used": examples_used(config, fitness, held_out, held_fingerprints),
        "context": fitness.context,
        "evaluations": result.evaluations,
        "questions_scored": result.questions_scored,  # racing: (candidate, question) pairs; None: plain GA
        "stopped_early": result.generations < config.ga.generations,
        "smoothness": smoothness(result.scales) if len(result.scales) >= 3 else None,
        "held_out": held_out,
        "unscaled_fitness": unscaled.to_json(),
        "run_config": config.to_dict(),
    }
    section = search_section(config.ga, config.weights, fitness.data_sha256, result.generations, wall_time, **extra)
    scale_file = ScaleFile.from_genome(space, result.best, result.fitness, model_record, section)
    write_scale_file(paths["scale"], scale_file)
    name = Path(model_record["name"]).name or model_record["name"]  # the model's directory, not its whole path
    title = f"{name} · {fitness.task} k={config.task.num_items}"
    plot_curve(paths["curve"], scale_file.to_json(), title=f"LPES scales · {title}")
    plot_fitness(paths["fitness"], read_log(paths["log"]), title=f"LPES search · {title}", unscaled=unscaled.overall)
    return wall_time


def _fmt(result: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.3f}" for k, v in result["per_subset"].items())
    return f"{result['overall']:.4f} ({parts})"


def _print_summary(summary: dict[str, Any], seconds: float) -> None:
    scales = summary["scales"]
    print(f"best fitness {_fmt(summary['fitness'])} after {summary['generations']} generations")
    print(f"unscaled model on the same search set: {_fmt(summary['unscaled_fitness'])}")
    print(f"scales: {' '.join(f'{s:.3f}' for s in scales)}  (mean {sum(scales) / len(scales):.3f})")
    held = summary["held_out"]
    if held:
        print(f"held-out ({held['num_examples']} examples, offset {held['example_offset']}, seed {held['seed']}):")
        print(f"  baseline       {_fmt(held['baseline'])}")
        print(f"  pi:scale={held['pi_mean']['scale']:.3f}  {_fmt(held['pi_mean'])}")
        print(f"  lpes           {_fmt(held['lpes'])}")
    print(f"{summary['evaluations']} candidates scored; this run took {seconds:.1f} s")
    for key in ("scale", "log", "curve", "fitness", "state", "config"):
        print(f"{key:8s} {summary['paths'][key]}")


def show(path: str, num_layers: int | None) -> int:
    """Validate a scale file and print what it holds."""
    from search.scale_file_writer import load_scale_file  # lazy: keeps --help fast

    data = load_scale_file(path, expected_num_layers=num_layers)
    scales = data.scales
    mean = sum(scales) / len(scales)
    curve = data.curve
    print(f"scale file {path}: valid (format_version {data.format_version})")
    print(f"model      {data.model['name']} (config sha256 {data.model['config_sha256'][:16]}…)")
    degree = f", degree {curve['degree']}" if curve["degree"] is not None else ""
    print(f"curve      {curve['type']}{degree}; control points {[tuple(p) for p in data.control_points]}")
    print(f"scales     {' '.join(f'{s:.3f}' for s in scales)}  ({data.num_layers} layers, mean {mean:.4g})")
    search = data.search
    loglik = search.get("task", {}).get("score") == "gold_loglik"  # files before task.score: the metric
    print(f"fitness    {_fmt(data.fitness)}" + (" (gold answer's mean log-probability per token)" if loglik else ""))
    print(
        f"search     seed {search['seed']}, {search['generations']} generations, "
        f"{search.get('evaluations', '?')} candidates, {search['wall_time_s']:.1f} s, weights {search['weights']}"
    )
    held = search.get("held_out")
    if held:
        print(f"held-out   baseline {_fmt(held['baseline'])}")
        print(f"           pi:scale={held['pi_mean']['scale']:.4g} {_fmt(held['pi_mean'])}")
        print(f"           lpes     {_fmt(held['lpes'])}")
    from evaluation.model_loading import TINY_DEFAULT_NAME  # lazy: keeps --help fast

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
    flags = ["--import", task["import"]] if task.get("import") else []  # a user's task: its module first
    flags += ["--tasks", name, "--num-examples", str(task["num_examples"]), "--seed", str(params.get("seed", 0))]
    flags += ["--gold-positions", "all"]
    for key, value in params.items():
        if key not in ("seed", "gold_positions", "num_examples") and value is not None:
            flags += ["--task-param", f"{name}:{key}={value}"]
    return flags


COMMANDS = {
    "run": ("run (or resume) a search", _add_run, _run),
    "show": (
        "validate a scale file and print it",
        _add_show,
        lambda options, _: show(options.scale_file, options.num_layers),
    ),
    "diagnose": (
        "structure deviation D and smoothness S of a scale file and its variants (search/structure.py)",
        _add_diagnose,
        _diagnose,
    ),
}


def main(argv: list[str] | None = None) -> int:
    # user mistakes (ConfigError, ScaleFileError are ValueErrors): one clear line, no traceback
    return dispatch(
        "python -m search",
        "LPES: search one RoPE scaling factor per layer of a frozen model with a Bézier-constrained genetic "
        "algorithm scored by the evaluation harness, and write a scale file.",
        COMMANDS,
        argv,
        resolves_config={"run"},
    )
