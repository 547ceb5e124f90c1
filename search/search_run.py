"""One whole search (torchrun-ready): fitness, GA with log, held-out check, scale file, plots.

`python -m search run` calls `run_search` once its options are checked (`search.cli`); Python callers (tests,
benchmarks) may call it directly. Under torchrun every rank loads the model and runs the same GA; the fitness
splits the prompts across ranks (search/harness_fitness.py) and only rank 0 writes files.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from repo_common.atomic import write_text_atomic
from repo_common.distributed import barrier, close_distributed, init_distributed, rank_and_world
from repo_common.launcher_watch import watch_launcher
from repo_common.run_lock import run_lock
from repo_train.modeling.swapping import current_policies
from search.fitness import describe_result
from search.ga import SearchState, load_resumable_state, run
from search.harness_fitness import HarnessFitness, check_held_out_available, evaluate_held_out, model_fingerprint
from search.outcome import every_candidate_scored, outcome_of, search_outcome
from search.outputs import check_search_outputs, lock_path
from search.plots import plot_curve, plot_fitness
from search.prepare import load_search_model, search_fitness, searched_model, task_parameters
from search.scale_file_writer import ScaleFile, load_scale_file, search_section, write_scale_file
from search.search_log import read_log, search_with_log
from search.show import print_evaluation_command
from search.smoothness import smoothness


def run_search(
    config, out: str | Path, *, resume: bool = False, fitness_cls=None, progress: bool = False, config_text=None
):
    """The whole search (torchrun-ready): fitness, GA with log, held-out check, scale file, plots.

    Returns a summary dict. `fitness_cls` replaces `HarnessFitness` (tests use a scorer with varied values).
    `config_text`, the command's resolved configuration, is written as NAME.config.yaml once the model and
    task are checked (`--config NAME.config.yaml` replays the search).
    """
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
    rank, _ = rank_and_world()
    paths = check_search_outputs(out, resume)  # also for a search started from Python
    if paths["state"].exists():
        SearchState.load(paths["state"])  # a truncated or corrupt state fails before the model is loaded
    wall = time.perf_counter()
    model, tokenizer = load_search_model(config.model)
    num_layers = len(current_policies(model))
    if config.model.num_layers is not None and config.model.num_layers != num_layers:
        raise ValueError(
            f"the config is for a {config.model.num_layers}-layer model, but the model has {num_layers} layers: "
            "pass --model.path the model it was written for, or another config"
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
        load_resumable_state(paths["state"], space, config.ga, getattr(fitness, "context", ""))
        finished = _finished_summary(config, paths)
        if finished is not None:  # rewriting it would change the file that evaluations of it pinned by hash
            if rank == 0:
                print(f"{paths['scale']} is this search's finished result (state at generation "
                      f"{finished['generations']}, same config): nothing to do", flush=True)  # fmt: skip
                _print_summary(finished, time.perf_counter() - wall)
            return finished
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
    start = space.initial() if space.uses_curve else None  # the brute-force space has no start to stay at
    summary["outcome"] = search_outcome(
        summary["fitness"],
        summary["unscaled_fitness"],
        held_out,
        left_start=None if start is None else result.best == start,
        start_scale=None if start is None else space.scales(start)[0],
        all_scored=every_candidate_scored(result.history),
    )
    summary.update(scales=result.scales, evaluations=result.evaluations, paths={k: str(v) for k, v in paths.items()})
    if rank == 0:
        name = str(config.model.path) if config.model.path else model.name_or_path
        model_record = {"name": name, **model_fingerprint(model), **searched_model(config.model, model)}
        summary["wall_time_s"] = _write_outputs(
            config, space, fitness, result, paths, model_record, held_out, unscaled, summary["outcome"]
        )
        _print_summary(summary, time.perf_counter() - wall)
    return summary


def _finished_summary(config, paths: dict[str, Path]) -> dict[str, Any] | None:
    """The summary of a search resumed after it ended: its state done under this config and its scale file
    written from that state with this config (`run_config`, the last generation); None when anything is left.

    Such a resume (a replayed commands.sh) changes nothing: a rewritten file would differ (its wall time) from
    the one evaluations of it recorded, and they would refuse to resume."""
    state = SearchState.load(paths["state"])
    ga = config.ga
    done = state.generation >= ga.generations or (ga.patience is not None and state.stale >= ga.patience)
    try:
        data = json.loads(paths["scale"].read_text(encoding="utf-8"))
        search = data["search"]
        same = search["run_config"] == json.loads(json.dumps(config.to_dict())) and search["generations"] == (
            state.generation
        )
    except (OSError, ValueError, KeyError, TypeError):  # unreadable or older: write it again from the state
        return None
    if not (done and same and search.get("unscaled_fitness")):
        return None
    return {
        "fitness": data["fitness"],
        "generations": search["generations"],
        "held_out": search.get("held_out"),
        "unscaled_fitness": search.get("unscaled_fitness"),
        "outcome": outcome_of(search, data["fitness"]),
        "scales": data["scales"],
        "evaluations": search.get("evaluations"),
        "paths": {key: str(value) for key, value in paths.items()},
        "wall_time_s": search.get("wall_time_s"),
    }


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


def _write_outputs(config, space, fitness, result, paths, model_record, held_out, unscaled, outcome) -> float:

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
        "outcome": outcome,  # whether it beats the unscaled model, and why not (search/outcome.py)
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


def _print_summary(summary: dict[str, Any], seconds: float) -> None:
    scales = summary["scales"]
    print(f"best fitness {describe_result(summary['fitness'])} after {summary['generations']} generations")
    print(f"unscaled model on the same search set: {describe_result(summary['unscaled_fitness'])}")
    print(f"scales: {' '.join(f'{s:.3f}' for s in scales)}  (mean {sum(scales) / len(scales):.3f})")
    held = summary["held_out"]
    if held:
        print(f"held-out ({held['num_examples']} examples, offset {held['example_offset']}, seed {held['seed']}):")
        print(f"  baseline       {describe_result(held['baseline'])}")
        print(f"  pi:scale={held['pi_mean']['scale']:.3f}  {describe_result(held['pi_mean'])}")
        print(f"  lpes           {describe_result(held['lpes'])}")
    print(f"{summary['evaluations']} candidates scored; this run took {seconds:.1f} s")
    for key in ("scale", "log", "curve", "fitness", "state", "config"):
        print(f"{key:8s} {summary['paths'][key]}")
    scale = summary["paths"]["scale"]
    print_evaluation_command(load_scale_file(scale), scale)  # the same lines as `python -m search show` prints
    warning = summary["outcome"]["warning"]
    if warning:  # last, on stderr: where a reader of the log and a caller's capture both see it
        print(f"warning: {warning}", file=sys.stderr, flush=True)
