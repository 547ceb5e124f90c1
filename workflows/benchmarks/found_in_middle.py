"""Cost of Found-in-the-Middle against plain generation, measured side by side in one run.

On a random OLMo-2 (byte tokenizer) and MDQA prompts from the packaged sample:

- time: greedy generation of the same batch with `baseline` and with
  `fim:temperature=5e-5,layers=last_half`, alternated for `--rounds` pairs
  (median ratio), plus the parts of fim: the calibration prefill of B·(K+1)
  prompts and the idle probe (wrapper overhead, no request);
- peak memory: baseline, fim and fim with `calibration_batch=1` (one
  calibration prompt per prefill) each generate once in a fresh process,
  which reports its peak RSS above the RSS after loading (CPU has no
  allocator counter to reset, so a process per configuration it is);
- what the probe keeps: the current-query rows it records vs the L×L
  attention matrices `output_attentions=True` would return for the same layers.

    python -m workflows benchmark-fim --docs 4 --examples 2 --new_tokens 8
"""

from __future__ import annotations

import argparse

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks import run_checked

PROG = "python -m workflows benchmark-fim"


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--docs", type=PositiveInt, default=4, help="documents per prompt (K)")
    parser.add_argument("--examples", type=PositiveInt, default=2, help="prompts in the batch (B)")
    parser.add_argument("--new_tokens", type=PositiveInt, default=8, help="tokens generated per prompt")
    parser.add_argument("--hidden", type=PositiveInt, default=256, help="model width (FFN 4x)")
    parser.add_argument("--layers", type=PositiveInt, default=4, help="decoder layers")
    parser.add_argument("--heads", type=PositiveInt, default=4, help="attention heads")
    parser.add_argument(
        "--rounds", type=PositiveInt, default=2, help="timed baseline/fim pairs (after one warm-up pair)"
    )
    parser.add_argument(
        "--threads", type=PositiveInt | None, default=None, help="torch threads (default: torch's own count)"
    )
    parser.add_argument("--child", type=str | None, default=None, help=argparse.SUPPRESS)  # a fresh process's method


def run(options: Namespace, parser: ConfigParser) -> int:
    return run_checked(options, parser, None, "workflows.benchmarks.found_in_middle_measure:main")
