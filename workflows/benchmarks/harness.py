"""The harness's generation loop vs `model.generate`, and the speed-up of batching, side by side in one run.

Builds a random model (byte tokenizer) and prompts of mixed lengths, then
alternates (generate, ours, generate, ours, ...) over the same batches so both
see the same machine state; prints tokens/s, the per-round time ratio and its
median (target: within 10%), and checks that both produce the same tokens.
Then times our loop with batch size 1 against batch size 8.

    python -m workflows benchmark-harness --prompts 16 --new_tokens 32 --hidden 256 --layers 4
"""

from __future__ import annotations

import argparse
from typing import Literal

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks import run_checked

PROG = "python -m workflows benchmark-harness"


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument(
        "--family", type=Literal["olmo2", "repo_olmo2"], default="olmo2", help="HF OLMo-2 or this project's"
    )
    parser.add_argument("--prompts", type=PositiveInt, default=16, help="prompts of mixed lengths")
    parser.add_argument("--min_chars", type=PositiveInt, default=200, help="shortest prompt, characters")
    parser.add_argument("--max_chars", type=PositiveInt, default=800, help="longest prompt, characters")
    parser.add_argument("--new_tokens", type=PositiveInt, default=32, help="tokens generated per prompt")
    parser.add_argument("--hidden", type=PositiveInt, default=256, help="model width (FFN 4x)")
    parser.add_argument("--layers", type=PositiveInt, default=4, help="decoder layers")
    parser.add_argument("--heads", type=PositiveInt, default=4, help="attention heads")
    parser.add_argument("--rounds", type=PositiveInt, default=5, help="timed A/B pairs (after 1 warm-up pair)")
    parser.add_argument(
        "--threads", type=PositiveInt | None, default=None, help="torch threads (default: torch's own count)"
    )


def check_options(args: argparse.Namespace) -> None:
    """Prompt lengths are drawn from [min_chars, max_chars]."""
    if args.min_chars > args.max_chars:
        raise ValueError(f"--min_chars {args.min_chars} is above --max_chars {args.max_chars}")


def run(options: Namespace, parser: ConfigParser) -> int:
    return run_checked(options, parser, check_options, "workflows.benchmarks.harness_measure:main")
