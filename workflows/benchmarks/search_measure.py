"""`python -m workflows benchmark-search`'s racing: both searches on the model, a generation of each in turn."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from evaluation.statistics import bootstrap_ci
from search.config import load_config
from search.ga import GAConfig, SearchState, run
from search.harness_fitness import HarnessFitness
from search.prepare import decode_settings, load_search_model, task_parameters
from workflows.benchmarks.search_report import VARIANTS, print_seed, racing_config, write_report


class HeldOut:
    """Held-out fitness of a scale vector with its question-bootstrap interval, each vector scored once."""

    def __init__(self, fitness: HarnessFitness):
        self.fitness, self.scored = fitness, {}

    def __call__(self, scales: list[float]) -> dict[str, float]:
        key = tuple(scales)
        if key not in self.scored:
            questions = self.fitness.evaluate_questions([scales], 0, self.fitness.num_questions)[0]
            interval = bootstrap_ci([q.overall for q in questions], 1000, 0.05, seed=0)
            overall = self.fitness.combine_questions(questions).overall
            self.scored[key] = {"fitness": overall, "low": interval.low, "high": interval.high}
        return self.scored[key]


def race_one_seed(args, space, fitness, held_out, seed: int, work: Path) -> dict:
    """Both searches, a generation of each in turn; per generation: cumulative prompts, seconds and held-out."""
    mutation = args.population - args.parents - args.crossover
    base = GAConfig(
        population=args.population,
        parents=args.parents,
        crossover_offspring=args.crossover,
        mutation_offspring=mutation,
        seed=seed,
    )
    racing = racing_config(args)
    configs = {"plain": base, "racing": dataclasses.replace(base, racing=racing)}
    prompts_per_question = len(fitness.prepared.rows) // fitness.num_questions
    curves: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    seconds = dict.fromkeys(VARIANTS, 0.0)
    for generation in range(args.generations + 1):
        for name in VARIANTS if generation % 2 == 0 else VARIANTS[::-1]:  # neither always runs first
            config = dataclasses.replace(configs[name], generations=generation)
            path = work / f"seed{seed}-{name}.state.json"
            start = time.perf_counter()
            result = run(space, fitness, config, context=fitness.context, state_path=path, resume=generation > 0)
            seconds[name] += time.perf_counter() - start
            if name == "plain":
                questions = sum(line["evaluated"] for line in result.history) * fitness.num_questions
            else:
                questions = result.questions_scored
            line = result.history[-1]
            curves[name].append(
                {
                    "new_candidates": line["evaluated"],
                    "cache_hits": line["cache_hits"],
                    "stage_questions": line.get("stage_questions"),
                    "dropped_exact": sum(line.get("dropped_exact", 0) for line in result.history),
                    "generation": generation,
                    "prompts": questions * prompts_per_question,
                    "seconds": seconds[name],
                    "search_fitness": result.fitness.overall,
                    "held_out": held_out(result.scales)["fitness"],
                    "dropped": sum(line.get("dropped", 0) for line in result.history),
                }
            )
    plain_final = held_out(space.scales(SearchState.load(work / f"seed{seed}-plain.state.json").best))
    out = summarise(seed, curves, plain_final)
    if space.uses_curve:  # the paper's starting individual, unsearched: is the plain GA's interval already reached?
        start = held_out(space.scales(space.initial()))["fitness"]
        out["start_held_out"] = start
        out["start_inside_plain_ci"] = plain_final["low"] <= start <= plain_final["high"]
    return out


def summarise(seed: int, curves: dict[str, list[dict]], plain_final: dict[str, float]) -> dict:
    """When each search reached the plain GA's final held-out interval, and racing / plain of both costs."""
    out = {"seed": seed, "plain_final": plain_final, "curves": curves}
    for name in VARIANTS:
        reached = next((line for line in curves[name] if line["held_out"] >= plain_final["low"]), None)
        out[name] = {"reached": reached, "final": curves[name][-1]}
    ratios = {}
    for key in ("prompts", "seconds"):
        plain, racing = out["plain"]["reached"], out["racing"]["reached"]
        ratios[f"{key}_to_reach"] = None if racing is None else racing[key] / plain[key]
        ratios[f"{key}_total"] = out["racing"]["final"][key] / out["plain"]["final"][key]
    out["ratios"] = ratios
    final = out["racing"]["final"]["held_out"]
    out["racing_inside_plain_ci"] = plain_final["low"] <= final <= plain_final["high"]
    out["racing_at_least_plain_ci"] = final >= plain_final["low"]
    return out


def race(args: argparse.Namespace, done: dict[int, dict], todo: list[int]) -> None:
    """Both searches for each seed of `todo` on the model, each round added to `done` and the report rewritten."""
    torch.set_num_threads(args.threads)
    search = load_config(args.search_config)
    task = dataclasses.replace(search.task, num_examples=args.questions, score=args.score or search.task.score)
    model, tokenizer = load_search_model(dataclasses.replace(search.model, path=args.model, device="cpu"))
    params, settings = task_parameters(task), decode_settings(task)
    common = {"seed": task.seed, "weights": search.weights, "settings": settings, "prompt_format": task.prompt_format}
    common.update(progress="off", score=task.score)
    fitness = HarnessFitness(model, tokenizer, task.name, params, num_examples=args.questions, **common)
    held = HarnessFitness(
        model, tokenizer, task.name, params, num_examples=args.held_out, example_offset=args.questions, **common
    )
    space = search.space.build(fitness.num_layers)
    print(
        f"{Path(args.model).name}: {task.name} k={task.num_items}, {args.questions} search questions "
        f"({len(fitness.prepared.rows)} prompts), {args.held_out} held-out; population {args.population}, "
        f"{args.generations} generations; score {task.score}; racing on {args.fractions} of the questions, confidence "
        f"{args.confidence}, min {args.min_questions} questions; {args.threads} thread(s)"
    )
    start = time.perf_counter()
    fitness.evaluate_questions([[1.0] * fitness.num_layers], 0, 1)  # warm-up: the first forward pays one-off costs
    print(f"warm-up {time.perf_counter() - start:.1f} s")
    with tempfile.TemporaryDirectory() as work:
        for seed in todo:
            done[seed] = race_one_seed(args, space, fitness, HeldOut(held), seed, Path(work))
            print_seed(done[seed])
            write_report(args, [done[s] for s in args.seeds if s in done])  # a stop keeps the finished rounds
