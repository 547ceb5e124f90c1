"""REPO vs RoPE vs transformers' OLMo-2: training-step time, memory and parameter overhead, side by side in one run.

Builds three OLMo-2 models of the same shape and weights: transformers'
`Olmo2ForCausalLM` (HF), this project's model with RoPE in every layer, and
with REPO (RoPE below `repo_start_layer`). Each round runs one
forward+backward step of each, in an order that rotates every round, so all
see the same machine state; it prints median times and the ratios RoPE/HF
and REPO/RoPE with their per-round range, the model-FLOPs ratio, the bytes
one training step allocates (peak, and what is held when backward starts)
for RoPE and REPO, and the parameter overhead for the OLMo-2 1B and 7B shapes.

    python -m workflows benchmark-repo-overhead --hidden 256 --layers 6 --heads 8 --seq_len 1024 --batch 2 \
        --threads 1 --clock cpu --rounds 12

On a machine other jobs share, `--threads 1 --clock cpu` times the CPU
seconds of the one computing thread: waiting for a core then does not count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks.options import RandomModelOptions, declare, measured

PROG = "python -m workflows benchmark-repo-overhead"


#: --clock: wall time, or CPU seconds of this process (all its threads).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclass
class RepoOverheadBenchmark(RandomModelOptions):
    """The benchmark's options (each also a key of a `--config` file)."""

    rounds: PositiveInt = 10
    """timed rounds, one step of each model (after 2 warm-up)"""
    layers: PositiveInt = 6
    """decoder layers"""
    seq_len: PositiveInt = 1024
    """tokens per sequence"""
    batch: PositiveInt = 2
    """sequences per step"""
    vocab: PositiveInt = 1024
    """vocabulary size"""
    clock: Literal["cpu", "wall"] = "wall"
    """wall time or process CPU time"""


OPTIONS = RepoOverheadBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, RepoOverheadBenchmark, __doc__)


def run(options: Namespace, parser: ConfigParser) -> int:
    return measured(options, RepoOverheadBenchmark, "workflows.benchmarks.repo_overhead_measure:main")
