"""Training throughput of RoPE vs REPO through the real Lightning path, side by side, and DDP scaling.

Runs the same tiny-but-not-trivial model with each position method on the same
synthetic data for the same steps, alternating methods over several rounds,
and prints median tokens/s and the REPO/RoPE ratio (target <= 1.05 in time,
i.e. >= 0.95 in throughput). Then times 1 vs 2 DDP processes (torchrun) on the
same global batch and prints the scaling.

    python -m workflows benchmark-training [--rounds 3] [--steps 8] [--seq_len 1024] [--skip_ddp true]
"""

from __future__ import annotations

from dataclasses import dataclass

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks.options import BenchmarkOptions, declare, measured

PROG = "python -m workflows benchmark-training"


@dataclass
class TrainingBenchmark(BenchmarkOptions):
    """The benchmark's options (each also a key of a `--config` file)."""

    rounds: PositiveInt = 3
    """timed RoPE/REPO pairs"""
    threads: PositiveInt = 2
    """torch threads of the RoPE/REPO runs (the DDP timing runs 1 a process)"""
    steps: PositiveInt = 8
    """timed optimizer steps per run (after 2 warm-up)"""
    seq_len: PositiveInt = 1024
    """tokens per sequence"""
    batch: PositiveInt = 2
    """sequences per step"""
    skip_ddp: bool = False
    """skip the 1 vs 2 DDP processes timing"""


OPTIONS = TrainingBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, TrainingBenchmark, __doc__)


def run(options: Namespace, parser: ConfigParser) -> int:
    return measured(options, TrainingBenchmark, "workflows.benchmarks.training_measure:main")
