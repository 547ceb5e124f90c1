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

from dataclasses import dataclass, field
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt

from repo_common.config_cli import ConfigParser, dataclass_config, deferred
from search.fitness import Score
from workflows.assets import TINY_KV_DIP
from workflows.benchmarks.options import declare
from workflows.benchmarks.search_report import combine, finish, kept_seeds, print_seed, racing_config, read_reports

PROG = "python -m workflows benchmark-search"
#: The checkout, where the default model and search config are.
REPO = Path(__file__).resolve().parents[2]


@dataclass
class SearchBenchmark:
    """The benchmark's options (each also a key of a `--config` file), judged when built; `--combine` reads its
    reports then (their own settings count, not this run's options), `--resume` the rounds `--json` holds. Its
    rounds are its `--seeds`, so it takes `--threads` alone of `options.BenchmarkOptions`."""

    model: str = str(TINY_KV_DIP)
    """model directory"""
    search_config: str = str(REPO / "configs" / "search" / "quick.yaml")
    """task and space"""
    questions: PositiveInt = 40
    """search-set questions (3 prompts each)"""
    held_out: PositiveInt = 40
    """held-out questions, after the search's"""
    population: PositiveInt = 8
    """GA population"""
    parents: PositiveInt = 3
    """parents kept per generation"""
    crossover: NonNegativeInt = 1
    """crossover children per generation"""
    generations: NonNegativeInt = 4
    """breeding rounds after generation 0"""
    seeds: list[int] = field(default_factory=lambda: [0])
    """GA seeds, one round of both searches each"""
    fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0])
    """racing stages"""
    confidence: float = 0.95
    """racing's bootstrap interval level"""
    min_questions: PositiveInt = 8
    """racing drops no one on fewer"""
    exact_bound: bool = False
    """racing also drops a candidate that cannot beat the incumbent at the top score on every question left"""
    score: Score | None = None
    """how a prompt is scored (task.score): metric (greedy answer) or gold_loglik; default: the search config's"""
    threads: PositiveInt = 1
    """torch threads"""
    json: str | None = None
    """also write the results here (atomically, after every seed)"""
    resume: bool = False
    """keep the seeds --json already holds (run with the same settings) and run only the others"""
    combine: list[str] = field(default_factory=list)
    """--json reports of rounds run apart (same settings, other seeds): print them as one; runs nothing"""

    def __post_init__(self) -> None:
        if self.combine:
            self.combined = read_reports(self.combine)  # the reports' own settings count, not this run's options
            return
        self.kept = kept_seeds(self)
        if self.parents + self.crossover >= self.population:
            raise ValueError(
                f"--population {self.population} leaves no mutation children after --parents {self.parents} and "
                f"--crossover {self.crossover}: raise --population"
            )
        if not self.seeds:
            raise ValueError("--seeds is empty: give at least one GA seed, e.g. --seeds '[0]'")
        if not Path(self.model).is_dir():
            raise ValueError(
                f"--model {self.model} is not a directory: pass a local HF model (e.g. workflows/assets/tiny-kv-dip)"
            )
        racing_config(self)  # its one-line checks


OPTIONS = SearchBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, SearchBenchmark, __doc__)


def run(options: Namespace, parser: ConfigParser) -> int:
    measure(dataclass_config(options, SearchBenchmark))
    return 0


def measure(args: SearchBenchmark) -> dict:
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
