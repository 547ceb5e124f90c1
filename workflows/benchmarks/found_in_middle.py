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

from dataclasses import dataclass

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks.options import RandomModelOptions, declare, measured

PROG = "python -m workflows benchmark-fim"


@dataclass
class FimBenchmark(RandomModelOptions):
    """The benchmark's options (each also a key of a `--config` file)."""

    rounds: PositiveInt = 2
    """timed baseline/fim pairs (after one warm-up pair)"""
    docs: PositiveInt = 4
    """documents per prompt (K)"""
    examples: PositiveInt = 2
    """prompts in the batch (B)"""
    new_tokens: PositiveInt = 8
    """tokens generated per prompt"""


OPTIONS = FimBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, FimBenchmark, __doc__)


def run(options: Namespace, parser: ConfigParser) -> int:
    return measured(options, FimBenchmark, "workflows.benchmarks.found_in_middle_measure:main")
