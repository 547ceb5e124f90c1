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

import argparse

from repo_common.config_cli import deferred, script_options
from workflows.commands import check_run_directory
from workflows.reversal.names import DESCRIPTIONS

ALL_METHODS = ("nope", "rope", "repo")


def add_arguments(parser) -> None:
    """The reproduction's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--out", type=str, default="outputs/reversal", help="output directory (created; resumes)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per method (0, 1, ...)")
    parser.add_argument(
        "--methods",
        type=list[str] | str,
        default=list(ALL_METHODS),
        help="position methods: comma-separated on the command line, or a list",
    )
    parser.add_argument("--steps", type=int, default=1500, help="training steps per model")
    parser.add_argument("--hidden", type=int, default=128, help="model width (4 layers, 4 heads, FFN 4x)")
    parser.add_argument("--lr", type=float, default=1e-2, help="peak learning rate (linear decay to 0)")
    parser.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    parser.add_argument("--batch_size", type=int, default=32, help="sequences per step")
    parser.add_argument(
        "--train_examples",
        type=int,
        default=50000,
        help="training sequences per seed (steps x batch = 48,000 are used)",
    )
    parser.add_argument("--examples_per_length", type=int, default=50, help="test sequences per length")
    parser.add_argument("--train_lengths", type=str, default="2-20", help="training lengths MIN-MAX (paper: 2-20)")
    parser.add_argument("--test_lengths", type=str, default="2-30", help="test lengths MIN-MAX (paper: 2-30)")
    parser.add_argument("--eval_batch_size", type=int, default=32, help="prompts per forward in evaluation")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per command (OMP_NUM_THREADS); 1 is fastest on a shared 2-core CPU",
    )


def check_options(args: argparse.Namespace) -> None:
    """The domain checks (a ValueError naming the option), then where it writes; sets `methods` as a list and the
    length bounds."""
    methods = args.methods.split(",") if isinstance(args.methods, str) else args.methods
    args.methods = [m.strip() for m in methods if m.strip()]
    unknown = sorted(set(args.methods) - set(ALL_METHODS))
    if unknown or not args.methods:
        raise ValueError(f"--methods: unknown {unknown}; choose from {list(ALL_METHODS)}")
    args.train_min, args.train_max = _length_range("--train_lengths", args.train_lengths)
    args.test_min, args.test_max = _length_range("--test_lengths", args.test_lengths)
    for name in ("seeds", "steps", "hidden", "batch_size", "train_examples", "examples_per_length", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1")
    check_run_directory(args.out, "a reversal reproduction", DESCRIPTIONS)


def _length_range(flag: str, text: str) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"{flag} must look like 2-20, got {text!r}") from None
    if not 1 <= low <= high:
        raise ValueError(f"{flag}: need 1 <= MIN <= MAX, got {text!r}")
    return low, high


def run(options, parser) -> int:
    """Check the options (`--print_config` prints them), then run the reproduction (its modules load torch)."""
    args = script_options(parser, options, check_options)  # --print_config prints them and exits 0
    deferred("workflows.reversal.reproduction", "reproduce")(args, parser)
    return 0
