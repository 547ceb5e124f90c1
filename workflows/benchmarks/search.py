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

    python -m workflows benchmark-search                          # 1 seed, a few minutes on 2 cores
    python -m workflows benchmark-search --seeds '[0,1,2,3,4]'    # five rounds: median and range
    python -m workflows benchmark-search --json bench.json        # also the whole table as JSON
    python -m workflows benchmark-search --seeds '[0,1,2,3,4]' --json bench.json --resume true  # after a stop
    python -m workflows benchmark-search --combine '[a.json,b.json]'  # rounds run apart, one summary

A real model's round can take half an hour. `--json` is rewritten (atomically)
after every seed, so a stopped run keeps its finished rounds, and the same
command with `--resume true` runs only the seeds the report lacks (its settings
must be this run's; without it an existing report is refused, not
overwritten). Rounds may also run in separate processes: `--combine`
reads their `--json` reports (the same settings but the seeds, each seed once),
prints every seed and the median and range over all of them, and runs nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt

from repo_common.config_cli import ConfigParser, deferred, script_options
from search.fitness import Score
from workflows.assets import TINY_KV_DIP
from workflows.benchmarks.search_report import combine, finish, kept_seeds, print_seed, racing_config, read_reports

PROG = "python -m workflows benchmark-search"
#: The checkout, where the default model and search config are.
REPO = Path(__file__).resolve().parents[2]


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--model", type=str, default=str(TINY_KV_DIP), help="model directory")
    parser.add_argument(
        "--search_config",
        type=str,
        default=str(REPO / "configs" / "search" / "quick.yaml"),
        help="task and space",
    )
    parser.add_argument("--questions", type=PositiveInt, default=40, help="search-set questions (3 prompts each)")
    parser.add_argument("--held_out", type=PositiveInt, default=40, help="held-out questions, after the search's")
    parser.add_argument("--population", type=PositiveInt, default=8, help="GA population")
    parser.add_argument("--parents", type=PositiveInt, default=3, help="parents kept per generation")
    parser.add_argument("--crossover", type=NonNegativeInt, default=1, help="crossover children per generation")
    parser.add_argument("--generations", type=NonNegativeInt, default=4, help="breeding rounds after generation 0")
    parser.add_argument("--seeds", type=list[int], default=[0], help="GA seeds, one round of both searches each")
    parser.add_argument("--fractions", type=list[float], default=[0.25, 0.5, 1.0], help="racing stages")
    parser.add_argument("--confidence", type=float, default=0.95, help="racing's bootstrap interval level")
    parser.add_argument("--min_questions", type=PositiveInt, default=8, help="racing drops no one on fewer")
    parser.add_argument(
        "--exact_bound",
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


def run(options: Namespace, parser: ConfigParser) -> int:
    measure(script_options(parser, options, check_options))
    return 0


def measure(args: argparse.Namespace) -> dict:
    """The report: of `--combine`'s reports, or of the seeds `--json` holds and those run now (the racing module,
    torch and the model, imported only when a seed is left to run)."""
    if args.combine:
        return combine(args)
    done = {result["seed"]: result for result in args.kept}
    for result in args.kept:
        print(f"\nkept from {args.json}:", end="")
        print_seed(result)
    todo = [seed for seed in args.seeds if seed not in done]
    if todo:
        deferred("workflows.benchmarks.search_measure", "race")(args, done, todo)
    return finish(args, [done[seed] for seed in args.seeds])
