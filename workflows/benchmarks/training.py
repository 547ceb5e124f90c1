"""Training throughput of RoPE vs REPO through the real Lightning path, side by side, and DDP scaling.

Runs the same tiny-but-not-trivial model with each position method on the same
synthetic data for the same steps, alternating methods over several rounds,
and prints median tokens/s and the REPO/RoPE ratio (target <= 1.05 in time,
i.e. >= 0.95 in throughput). Then times 1 vs 2 DDP processes (torchrun) on the
same global batch and prints the scaling.

    python -m workflows benchmark-training [--rounds 3] [--steps 8] [--seq_len 1024]
"""

from __future__ import annotations

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks import run_checked

PROG = "python -m workflows benchmark-training"


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--rounds", type=PositiveInt, default=3, help="timed RoPE/REPO pairs")
    parser.add_argument("--steps", type=PositiveInt, default=8, help="timed optimizer steps per run (after 2 warm-up)")
    parser.add_argument("--seq_len", type=PositiveInt, default=1024, help="tokens per sequence")
    parser.add_argument("--batch", type=PositiveInt, default=2, help="sequences per step")
    parser.add_argument("--skip_ddp", action="store_true", help="skip the 1 vs 2 DDP processes timing")


def run(options: Namespace, parser: ConfigParser) -> int:
    return run_checked(options, parser, None, "workflows.benchmarks.training_measure:main")
