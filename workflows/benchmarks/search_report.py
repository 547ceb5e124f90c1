"""`python -m workflows benchmark-search`'s reports (printed per seed and over seeds, written as JSON, combined) and
the settings they record (the racing variant's included)."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from repo_common.atomic import write_json_atomic
from repo_common.json_files import read_json_object
from search.racing import RacingConfig

PROG = "python -m workflows benchmark-search"

TARGET_RATIO = 1 / 3
VARIANTS = ("plain", "racing")


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
            raise ValueError(f"{option} {path} is not a report of this benchmark (no settings and seeds); {fix}")
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


def racing_config(args: argparse.Namespace) -> RacingConfig:
    """The racing variant's settings, from the options (checked by the options' check, used by the measuring)."""
    return RacingConfig(
        tuple(args.fractions), args.confidence, min_questions=args.min_questions, exact_bound=args.exact_bound
    )


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
