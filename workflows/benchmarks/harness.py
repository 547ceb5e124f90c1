"""The harness's generation loop vs `model.generate`, and the speed-up of batching, side by side in one run.

Builds a random model (byte tokenizer) and prompts of mixed lengths, then
alternates (generate, ours, generate, ours, ...) over the same batches so both
see the same machine state; prints tokens/s, the per-round time ratio and its
median (target: within 10%), and checks that both produce the same tokens.
Then times our loop with batch size 1 against batch size 8.

    python -m workflows benchmark-harness --prompts 16 --new_tokens 32 --hidden 256 --layers 4
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser
from workflows.benchmarks.options import RandomModelOptions, declare, measured

PROG = "python -m workflows benchmark-harness"


@dataclass
class HarnessBenchmark(RandomModelOptions):
    """The benchmark's options (each also a key of a `--config` file)."""

    rounds: PositiveInt = 5
    """timed A/B pairs (after 1 warm-up pair)"""
    family: Literal["olmo2", "repo_olmo2"] = "olmo2"
    """HF OLMo-2 or this project's"""
    prompts: PositiveInt = 16
    """prompts of mixed lengths"""
    min_chars: PositiveInt = 200
    """shortest prompt, characters"""
    max_chars: PositiveInt = 800
    """longest prompt, characters"""
    new_tokens: PositiveInt = 32
    """tokens generated per prompt"""

    def __post_init__(self) -> None:
        """Prompt lengths are drawn from [min_chars, max_chars]."""
        if self.min_chars > self.max_chars:
            raise ValueError(f"--min_chars {self.min_chars} is above --max_chars {self.max_chars}: lower it")


OPTIONS = HarnessBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, HarnessBenchmark, __doc__)


def run(options: Namespace, parser: ConfigParser) -> int:
    return measured(options, HarnessBenchmark, "workflows.benchmarks.harness_measure:main")
