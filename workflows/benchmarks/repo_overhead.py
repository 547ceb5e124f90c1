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

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks import run_checked

PROG = "python -m workflows benchmark-repo-overhead"


#: --clock: wall time, or CPU seconds of this process (all its threads).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--seq_len", type=PositiveInt, default=1024, help="tokens per sequence")
    parser.add_argument("--batch", type=PositiveInt, default=2, help="sequences per step")
    parser.add_argument("--hidden", type=PositiveInt, default=256, help="model width")
    parser.add_argument("--heads", type=PositiveInt, default=4, help="attention heads")
    parser.add_argument("--layers", type=PositiveInt, default=6, help="decoder layers")
    parser.add_argument("--vocab", type=PositiveInt, default=1024, help="vocabulary size")
    parser.add_argument(
        "--rounds", type=PositiveInt, default=10, help="timed rounds, one step of each model (after 2 warm-up)"
    )
    parser.add_argument(
        "--threads", type=PositiveInt | None, default=None, help="torch threads (default: torch's own count)"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall time or process CPU time")


def run(options: Namespace, parser: ConfigParser) -> int:
    return run_checked(options, parser, None, "workflows.benchmarks.repo_overhead_measure:main")
