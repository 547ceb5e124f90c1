"""How long each command takes to answer `--help`, a refusal that needs no model, and `--print_config`.

    python -m workflows benchmark-startup [--rounds 5] [--compare OTHER_CHECKOUT] [--only help] [--match 'evaluation run']

Each case is a fresh interpreter (`python -m PACKAGE ...` or `python scripts/X.py ...`) with
OMP_NUM_THREADS=1, timed wall-clock from start to exit. The cases run in interleaved rounds (every case once
per round, in the same order), so a load that comes and goes hits them all alike; the table gives the median
and the range over the rounds. `--compare DIR` times the same cases in another checkout of the project (e.g.
an older commit, unpacked with `git archive`) in the same rounds, right after each case here, and adds its
median and the ratio: the only way to compare on a shared machine. `--match TEXT` keeps the cases whose
command contains TEXT (one command's cases, measured in minutes rather than the whole table). The target of
issue 24 is <= 2 s on two quiet cores for every case but fit / validate, which LightningCLI answers (its
parser is built from the model classes: ~20 s on two loaded cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, dataclass_config
from workflows.benchmarks.options import declare

ROOT = Path(__file__).resolve().parents[2]
#: (kind, command line after `python`): every command's --help and one model-free refusal, some --print_config
#: cases; fit's are LightningCLI's (slow: compare them with --match fit).
CASES = [
    ("help", "-m repo_train --help"),
    ("help", "-m repo_train demo --help"),
    ("help", "-m repo_train export --help"),
    ("help", "-m repo_train real-model --help"),
    ("help", "-m repo_train fit --help"),
    ("help", "-m evaluation --help"),
    ("help", "-m evaluation run --help"),
    ("help", "-m evaluation report --help"),
    ("help", "-m evaluation summarize --help"),
    ("help", "-m search run --help"),
    ("help", "-m search show --help"),
    ("help", "-m search diagnose --help"),
    ("help", "-m workflows check-gpu --help"),
    ("help", "-m workflows quickstart --help"),
    ("help", "-m workflows reproduce-position-bias --help"),
    ("help", "-m workflows benchmark-calibrators --help"),
    ("help", "-m workflows benchmark-training --help"),
    ("help", "-m workflows crosscheck-lm-eval --help"),
    ("refusal", "-m repo_train demo --steps 0"),
    ("refusal", "-m repo_train export --out x"),
    ("refusal", "-m evaluation report"),
    ("refusal", "-m evaluation run --out x --tasks nope"),
    ("refusal", "-m search run --ga.population many"),
    ("refusal", "-m workflows check-gpu --train_processes 0"),
    ("refusal", "-m workflows quickstart --steps none"),
    ("refusal", "-m evaluation calibrate-fim --model m --method pi --out b.json"),
    ("refusal", "-m repo_train fit --trainer.max_steps abc"),
    ("refusal", "-m repo_train fit --checkpoint.every_n_train_steps 0"),
    ("refusal", "-m repo_train validate"),
    ("print_config", "-m repo_train demo --print_config"),
    ("print_config", "-m repo_train fit --print_config"),
    ("print_config", "-m evaluation run --print_config"),
    ("print_config", "-m search run --print_config"),
    ("print_config", "-m workflows quickstart --print_config"),
    ("print_config", "-m workflows benchmark-calibrators --print_config"),
]


@dataclass
class StartupBenchmark:
    """The benchmark's options (each also a key of a `--config` file), judged when built. Its cases run in fresh
    interpreters with one thread each, so it takes `--rounds` alone of `options.BenchmarkOptions`."""

    rounds: PositiveInt = 5
    """interleaved rounds (median and range)"""
    compare: str | None = None
    """another checkout of the project, timed alongside"""
    only: str | None = None
    """comma-separated kinds: help, refusal, print_config"""
    match: str | None = None
    """only the cases whose command contains this text"""

    def __post_init__(self) -> None:
        if self.compare is not None and not (Path(self.compare) / "repo_common").is_dir():
            raise ValueError(f"--compare {self.compare!r} is not a checkout of this project (no repo_common/)")
        kinds = {kind for kind, _ in CASES}
        if self.only is not None and not set(self.only.split(",")) <= kinds:
            raise ValueError(f"--only {self.only!r}: choose comma-separated kinds from {sorted(kinds)}")
        if self.match is not None and not any(self.match in command for _, command in CASES):
            raise ValueError(f"--match {self.match!r} is in no case's command; e.g. --match 'evaluation run'")


OPTIONS = StartupBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, StartupBenchmark, __doc__.split("\n\n")[0])


def time_once(root: Path, command: str) -> tuple[float, int]:
    """(seconds, exit code) of `python COMMAND` in `root`, its own code first on the path."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *command.split()], cwd=root, env=env, capture_output=True, timeout=600, check=False
    )
    return time.perf_counter() - start, done.returncode


def run(parsed: Namespace, parser: ConfigParser) -> int:
    options = dataclass_config(parsed, StartupBenchmark)
    cases = [(kind, cmd) for kind, cmd in CASES if options.only is None or kind in options.only.split(",")]
    cases = [(kind, cmd) for kind, cmd in cases if options.match is None or options.match in cmd]
    roots = {"here": ROOT, **({"compare": Path(options.compare).resolve()} if options.compare else {})}
    times: dict[tuple[str, str], list[float]] = {(name, cmd): [] for name in roots for _, cmd in cases}
    codes: dict[tuple[str, str], int] = {}
    for round_index in range(options.rounds):
        for _, command in cases:
            for name, root in roots.items():
                seconds, code = time_once(root, command)
                times[name, command].append(seconds)
                codes[name, command] = code
        print(f"round {round_index + 1}/{options.rounds} done", file=sys.stderr, flush=True)
    header = f"| {'command':48s} | kind | exit | median s | range s |"
    if options.compare:
        header += " compare median s | compare exit | speed-up |"
    print(header)
    print("|" + "|".join("---" for _ in range(header.count("|") - 1)) + "|")
    for kind, command in cases:
        here = times["here", command]
        row = f"| `{command}`".ljust(50) + f" | {kind} | {codes['here', command]} | {statistics.median(here):.2f} |"
        row += f" {min(here):.2f}-{max(here):.2f} |"
        if options.compare:
            other = times["compare", command]
            ratio = statistics.median(other) / statistics.median(here)
            row += f" {statistics.median(other):.2f} | {codes['compare', command]} | {ratio:.1f}x |"
        print(row)
    print(f"\n{options.rounds} interleaved rounds, OMP_NUM_THREADS=1, load average {os.getloadavg()[0]:.1f} at the end")
    return 0
