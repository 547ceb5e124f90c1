#!/usr/bin/env python
"""The racing search against the plain GA, side by side: prompts and time each needs to reach the plain GA's result.

On the tiny dip base (`workflows/assets/tiny-kv-dip`, the quickstart's search task of
configs/search/quick.yaml with more questions) both searches run with the same
seed and budget, one generation of each in turn so both see the same machine
state (the order alternating between generations, after a warm-up forward).
After every generation the best individual so far is scored on
held-out questions (not counted in either search's cost). The plain GA's
final held-out fitness gets a 95% bootstrap interval over questions
(`evaluation.statistics.bootstrap_ci`); a search "reaches" it at the first
generation whose best scores at least that interval's lower end held out.
Printed per seed: prompts generated and search seconds (fitness + bookkeeping,
the held-out scoring excluded) to reach it and in all, the ratio racing /
plain (target: at most 1/3 of the prompts), and whether the racing result's
held-out fitness is inside the plain GA's interval; over several seeds, the
median and range of the ratios.

    python scripts/benchmark_search.py                          # 1 seed, a few minutes on 2 cores
    python scripts/benchmark_search.py --seeds '[0,1,2,3,4]'    # five rounds: median and range
    python scripts/benchmark_search.py --json bench.json        # also the whole table as JSON
    python scripts/benchmark_search.py --seeds '[0,1,2,3,4]' --json bench.json --resume true  # after a stop
    python scripts/benchmark_search.py --combine '[a.json,b.json]'  # rounds run apart, one summary

A real model's round can take half an hour. `--json` is rewritten (atomically)
after every seed, so a stopped run keeps its finished rounds, and the same
command with `--resume true` runs only the seeds the report lacks (its settings
must be this run's; without it an existing report is refused, not
overwritten). Rounds may also run in separate processes: `--combine`
reads their `--json` reports (the same settings but the seeds, each seed once),
prints every seed and the median and range over all of them, and runs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jsonargparse.typing import NonNegativeInt, PositiveInt

REPO = Path(__file__).resolve().parents[1]

from evaluation.statistics import bootstrap_ci
from repo_common.atomic import write_json_atomic
from repo_common.config_cli import ConfigParser, parse_script
from repo_common.json_files import read_json_object
from search.config import load_config
from search.fitness import Score
from search.ga import GAConfig, SearchState, run
from search.racing import RacingConfig
from workflows.assets import TINY_KV_DIP

if TYPE_CHECKING:  # an annotation's name only: --help answers without torch
    from search.harness_fitness import HarnessFitness

PROG = "scripts/benchmark_search.py"
TARGET_RATIO = 1 / 3
VARIANTS = ("plain", "racing")


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--model", type=str, default=str(TINY_KV_DIP), help="model directory")
    parser.add_argument(
        "--search_config",
        "--search-config",
        type=str,
        default=str(REPO / "configs" / "search" / "quick.yaml"),
        help="task and space",
    )
    parser.add_argument("--questions", type=PositiveInt, default=40, help="search-set questions (3 prompts each)")
    parser.add_argument(
        "--held_out", "--held-out", type=PositiveInt, default=40, help="held-out questions, after the search's"
    )
    parser.add_argument("--population", type=PositiveInt, default=8, help="GA population")
    parser.add_argument("--parents", type=PositiveInt, default=3, help="parents kept per generation")
    parser.add_argument("--crossover", type=NonNegativeInt, default=1, help="crossover children per generation")
    parser.add_argument("--generations", type=NonNegativeInt, default=4, help="breeding rounds after generation 0")
    parser.add_argument("--seeds", type=list[int], default=[0], help="GA seeds, one round of both searches each")
    parser.add_argument("--fractions", type=list[float], default=[0.25, 0.5, 1.0], help="racing stages")
    parser.add_argument("--confidence", type=float, default=0.95, help="racing's bootstrap interval level")
    parser.add_argument(
        "--min_questions", "--min-questions", type=PositiveInt, default=8, help="racing drops no one on fewer"
    )
    parser.add_argument(
        "--exact_bound",
        "--exact-bound",
        type=bool,
        default=False,
        help="racing also drops a candidate that cannot beat the incumbent at the top score on every question left",
    )
    parser.add_argument(
        "--score",
        type=Score | None,
        default=None,
        help="how a prompt is scored (task.score): metric (greedy answer) or gold_loglik; default: the search config's",
    )
    parser.add_argument("--threads", type=PositiveInt, default=1, help="torch threads")
    parser.add_argument(
        "--json", type=str, default=None, help="also write the results here (atomically, after every seed)"
    )
    parser.add_argument(
        "--resume",
        type=bool,
        default=False,
        help="keep the seeds --json already holds (run with the same settings) and run only the others",
    )
    parser.add_argument(
        "--combine",
        type=list[str],
        default=[],
        help="--json reports of rounds run apart (same settings, other seeds): print them as one; runs nothing",
    )
    return parser


def check_options(args: argparse.Namespace) -> None:
    if args.combine:
        args.combined = read_reports(args.combine)  # the reports' own settings count, not this run's options
        return
    args.kept = kept_seeds(args)
    if args.parents + args.crossover >= args.population:
        raise ValueError(
            f"--population {args.population} leaves no mutation children after --parents {args.parents} and "
            f"--crossover {args.crossover}: raise --population"
        )
    if not args.seeds:
        raise ValueError("--seeds is empty: give at least one GA seed, e.g. --seeds '[0]'")
    if not Path(args.model).is_dir():
        raise ValueError(
            f"--model {args.model} is not a directory: pass a local HF model (e.g. workflows/assets/tiny-kv-dip)"
        )
    racing_config(args)  # its one-line checks


def racing_config(args: argparse.Namespace) -> RacingConfig:
    return RacingConfig(
        tuple(args.fractions), args.confidence, min_questions=args.min_questions, exact_bound=args.exact_bound
    )


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


def _fmt(value, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def print_seed(result: dict) -> None:
    final = result["plain_final"]
    print(
        f"\nseed {result['seed']}: plain GA's final held-out fitness {final['fitness']:.4f} "
        f"[{final['low']:.4f}, {final['high']:.4f}] (95% CI over questions)"
    )
    print(f"{'variant':8s} {'gen':>3s} {'prompts':>8s} {'seconds':>8s} {'held-out':>8s} {'dropped':>7s}  reached at")
    for name in VARIANTS:
        final_line, reached = result[name]["final"], result[name]["reached"]
        where = "-" if reached is None else f"gen {reached['generation']}: {reached['prompts']} prompts, "
        where += "" if reached is None else f"{reached['seconds']:.1f} s"
        print(
            f"{name:8s} {final_line['generation']:3d} {final_line['prompts']:8d} {final_line['seconds']:8.1f} "
            f"{final_line['held_out']:8.4f} {final_line['dropped']:7d}  {where}"
        )
    for name in VARIANTS:
        steps = ", ".join(
            f"{line['prompts']}:{line['held_out']:.3f}" + (f" ({line['dropped']} dropped)" if name == "racing" else "")
            for line in result["curves"][name]
        )
        print(f"  {name} per generation, cumulative prompts:held-out: {steps}")
    racing_steps = "; ".join(
        f"gen {line['generation']}: {line['new_candidates']} new, {line['cache_hits']} cached, questions by stage "
        f"{line['stage_questions']}, {line['dropped']} dropped so far ({line['dropped_exact']} by the exact bound)"
        for line in result["curves"]["racing"]
    )
    print(f"  racing's evaluations: {racing_steps}")
    if "start_held_out" in result:
        inside = "inside" if result["start_inside_plain_ci"] else "outside"
        print(f"  the starting individual, unsearched: held-out {result['start_held_out']:.4f}, {inside} that CI")
    ratios = result["ratios"]
    print(
        f"racing/plain to reach: prompts {_fmt(ratios['prompts_to_reach'], '.3f')} (target <= {TARGET_RATIO:.3f}), "
        f"seconds {_fmt(ratios['seconds_to_reach'], '.3f')}; whole run: prompts {ratios['prompts_total']:.3f}, "
        f"seconds {ratios['seconds_total']:.3f}"
    )
    inside = "yes" if result["racing_inside_plain_ci"] else "no"
    above = " (above it)" if result["racing_at_least_plain_ci"] and not result["racing_inside_plain_ci"] else ""
    print(f"racing's final held-out fitness inside the plain GA's CI: {inside}{above}")


def overall_summary(results: list[dict]) -> dict:
    """Median and range over seeds of each ratio (a seed where racing never reached counts as not reached)."""
    summary = {}
    for key in ("prompts_to_reach", "seconds_to_reach", "prompts_total", "seconds_total"):
        values = [r["ratios"][key] for r in results if r["ratios"][key] is not None]
        summary[key] = {
            "median": statistics.median(values) if values else None,
            "min": min(values) if values else None,
            "max": max(values) if values else None,
            "not_reached": sum(r["ratios"][key] is None for r in results),
        }
    summary["racing_inside_plain_ci"] = sum(r["racing_inside_plain_ci"] for r in results)
    summary["racing_at_least_plain_ci"] = sum(r["racing_at_least_plain_ci"] for r in results)
    summary["start_inside_plain_ci"] = sum(r.get("start_inside_plain_ci", False) for r in results)
    summary["seeds"] = len(results)
    summary["target_prompts_ratio"] = TARGET_RATIO
    return summary


def print_summary(summary: dict) -> None:
    print(f"\nover {summary['seeds']} seed(s), racing / plain (median [min, max]):")
    for key, stats in summary.items():
        if isinstance(stats, dict):
            median = _fmt(stats["median"], ".3f")
            span = "" if stats["median"] is None else f" [{stats['min']:.3f}, {stats['max']:.3f}]"
            missing = f", not reached in {stats['not_reached']}" if stats["not_reached"] else ""
            print(f"  {key:17s} {median}{span}{missing}")
    print(
        f"  racing's final held-out inside the plain GA's CI in {summary['racing_inside_plain_ci']} of "
        f"{summary['seeds']}, at least its lower end in {summary['racing_at_least_plain_ci']}; the unsearched "
        f"starting individual's in {summary['start_inside_plain_ci']}"
    )


# Settings that may differ between the rounds of one combined benchmark.
PER_ROUND_SETTINGS = ("seeds", "json", "combine", "resume")


def differing_settings(ours: dict, theirs: dict) -> list[str]:
    """The settings two runs do not share, sorted; those a round may change (`PER_ROUND_SETTINGS`) aside."""
    keys = (ours.keys() | theirs.keys()) - set(PER_ROUND_SETTINGS)
    return sorted(k for k in keys if ours.get(k) != theirs.get(k))


def read_reports(paths: list[str], option: str = "--combine") -> dict:
    """Several `--json` reports as one: their seeds in order, the settings they share; a mismatch is one line
    naming `option`, the one that gave the paths."""
    fix = f"give reports that {PROG} --json FILE wrote"
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{option} {path}: no such file; {fix}")
    reports = [read_json_object(path, "a benchmark report", fix) for path in paths]
    for path, report in zip(paths, reports):
        if not {"settings", "seeds"} <= report.keys() or not isinstance(report["settings"], dict):
            raise ValueError(f"{option} {path} is not a report of this script (no settings and seeds); {fix}")
    first = reports[0]["settings"]
    for path, report in zip(paths[1:], reports[1:]):
        theirs = report["settings"]
        differing = differing_settings(first, theirs)
        if differing:
            key, more = differing[0], f" (and {len(differing) - 1} more settings)" if len(differing) > 1 else ""
            raise ValueError(
                f"{option} {path} was run with {key}={theirs.get(key)!r}, {paths[0]} with "
                f"{first.get(key)!r}{more}: combine only rounds of the same settings"
            )
    results = [seed for report in reports for seed in report["seeds"]]
    seeds = [result["seed"] for result in results]
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise ValueError(f"{option}: seed {repeated[0]} is in more than one report: keep one round per seed")
    first = {k: v for k, v in first.items() if k not in PER_ROUND_SETTINGS}
    settings = {**first, "seeds": seeds, "combined_from": [str(Path(path)) for path in paths]}
    return {"settings": settings, "seeds": results, "summary": overall_summary(results)}


def run_settings(args: argparse.Namespace) -> dict:
    """What a report records of the run (`settings`): the options, not what the checks attached."""
    return {k: v for k, v in vars(args).items() if k not in ("kept", "combined")}


def kept_seeds(args: argparse.Namespace) -> list[dict]:
    """With `--resume`, the rounds the `--json` report already holds; a report of other settings is refused."""
    if not args.resume:
        if args.json is not None and Path(args.json).exists():  # rewritten after the first seed: its rounds would go
            raise ValueError(
                f"--json {args.json} already exists: pass --resume true to keep its rounds and run only the "
                "missing seeds, or give another --json"
            )
        return []
    if args.json is None:
        raise ValueError("--resume keeps the seeds of the --json report: pass --json FILE too")
    if not Path(args.json).exists():
        return []  # nothing finished yet: a first run with --resume is a plain run
    earlier = read_reports([args.json], "--resume with --json")
    ours = run_settings(args)
    theirs = {k: v for k, v in earlier["settings"].items() if k != "combined_from"}  # read_reports' own record
    differing = differing_settings(ours, theirs)
    if differing:
        key = differing[0]
        raise ValueError(
            f"--resume: {args.json} was run with {key}={theirs.get(key)!r}, this run has {ours.get(key)!r}: "
            "resume with the report's settings, or write another --json"
        )
    extra = [result["seed"] for result in earlier["seeds"] if result["seed"] not in args.seeds]
    if extra:
        raise ValueError(
            f"--resume: {args.json} holds seed {extra[0]}, which --seeds does not list: add it to --seeds "
            "(its round is kept, not rerun), or write another --json"
        )
    return earlier["seeds"]


def combine(args: argparse.Namespace) -> dict:
    report = args.combined
    settings = report["settings"]
    print(
        f"{len(args.combine)} report(s), {Path(settings['model']).name}, population {settings['population']}, "
        f"{settings['generations']} generations, score {settings['score']}: seeds {settings['seeds']}"
    )
    for result in report["seeds"]:
        print_seed(result)
    print_summary(report["summary"])
    if args.json:
        write_json_atomic(args.json, report)
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv, check_options)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.combine:
        return combine(args)
    done = {result["seed"]: result for result in args.kept}
    for result in args.kept:
        print(f"\nkept from {args.json}:", end="")
        print_seed(result)
    todo = [seed for seed in args.seeds if seed not in done]
    if not todo:
        return finish(args, [done[seed] for seed in args.seeds])
    import torch  # lazy: --help answers without torch

    from search.harness_fitness import HarnessFitness  # lazy: --help answers without torch
    from search.prepare import decode_settings, load_search_model, task_parameters

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
    return finish(args, [done[seed] for seed in args.seeds])


def write_report(args: argparse.Namespace, results: list[dict]) -> dict:
    """The report of the rounds so far, written to `--json` (atomically) when one is given."""
    report = {"settings": run_settings(args), "seeds": results, "summary": overall_summary(results)}
    if args.json:
        write_json_atomic(args.json, report)
    return report


def finish(args: argparse.Namespace, results: list[dict]) -> dict:
    report = write_report(args, results)
    print_summary(report["summary"])
    return report


if __name__ == "__main__":
    main()
