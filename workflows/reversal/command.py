"""REPO paper, appendix C: text reversal with NoPE, RoPE and REPO, CPU only.

    python -m workflows reproduce-reversal [--out outputs/reversal] [--seeds 3] [--methods nope,rope,repo]

For every (seed, method): train a 4-layer tiny OLMo-2 from scratch on word
reversal of lengths 2-20 (loss on the answer only, a word-level tokenizer),
with the real Lightning path; export it; evaluate it with the harness on
lengths 2-30 (`--tasks reversal`, exact match). Then aggregate accuracy per
length over seeds (mean ± sample std), the in-distribution (2-20) and
extrapolation (21-30) means, and write OUT/results.json, OUT/results.md and
OUT/reversal.png. A (method, seed) whose evaluation summary exists is skipped,
so an interrupted run resumes by rerunning the same command.

Training sequences come from `reversal_training_words` (its own seed stream,
seeded by the run's seed), minus any that equal a test sequence; the test set
(seed EVAL_SEED) is the same for every run, so methods and seeds are compared
on the same prompts. Every command is appended to OUT/commands.sh, whose header names this
command: that is how a rerun recognises its own directory (any other non-empty --out is refused); each
run's output goes to OUT/logs/. Docs: docs/reproductions.md.
"""

from __future__ import annotations

from jsonargparse import Namespace

from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config, deferred
from workflows.reversal.names import DESCRIPTIONS
from workflows.reversal.options import Reversal

#: DESCRIPTIONS: the commands.sh headers that mark an output folder as this command's.
__all__ = ["DESCRIPTIONS", "add_arguments", "run"]


def add_arguments(parser: ConfigParser) -> None:
    """The reproduction's options: the fields of `Reversal` (workflows.reversal.options)."""
    parser.description = __doc__
    add_dataclass_options(parser, Reversal)


def run(options: Namespace, parser: ConfigParser) -> int:
    """The options judged by `Reversal`, then the reproduction (its modules load torch)."""
    deferred("workflows.reversal.reproduction", "reproduce")(dataclass_config(options, Reversal))
    return 0
