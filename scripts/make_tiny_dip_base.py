#!/usr/bin/env python
"""Make workflows/assets/tiny-kv-dip: the built-in tiny RoPE model with a measured lost-in-the-middle dip.

    python scripts/make_tiny_dip_base.py [--out workflows/assets/tiny-kv-dip] [--work outputs/tiny-kv-dip-work]

The quickstart must open on a model whose middle is worth repairing and must
still fit in minutes on a CPU, so the dip is trained once, here, and shipped.
The recipe is the position-bias recipe's (workflows/position_bias.py, its
`train_model`, so this and the reproduction make the same model from the same
seed): continue workflows/assets/tiny-kv-base with RoPE through the Lightning
path (`python -m repo_train fit`, then `export`) on 64-pair key-value streams
(8 distinct keys, 193 tokens) whose gold pair is always in the first or last 4
pairs.

The model is then measured on held-out prompts (another seed, gold at 8 evenly
spaced pairs): the baseline and the calibrators that the quickstart offers
against the dip, one `python -m evaluation run` per method (timed, since the
quickstart's budget is set by them), then one command that summarizes them
together (workflows/tiny_dip.py). OUT gets the model files and a README.md
with the command, the recipe, and the accuracy by position, middle and edges
with 95% intervals.

Every step whose output exists in WORK is skipped, so an interrupted run
resumes by rerunning the same command. OUT is written at once (a staging
directory moved into place); an existing OUT is left alone: delete it to remake.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.results import RECORDS_FILE, load_summary, read_records
from repo_common.atomic import atomic_directory
from repo_common.config_cli import ConfigParser, add_dataclass_options, typed_options
from repo_train.export_directory import EXPORT_MANIFEST
from workflows import position_bias as recipe
from workflows.assets import TINY_KV_DIP
from workflows.commands import CommandRunner
from workflows.tiny_dip import METHODS, evaluate, readme

ROOT = Path(__file__).resolve().parents[1]
PROG = "scripts/make_tiny_dip_base.py"


@dataclass
class TinyDip:
    """The asset's options (each also a key of a `--config` file), judged when built."""

    out: str = str(TINY_KV_DIP)
    """HF model directory to write (left alone if it exists)"""
    work: str = "outputs/tiny-kv-dip-work"
    """training and evaluation outputs (resumes)"""
    base: str = str(recipe.BASE)
    """RoPE HF model to continue"""
    seed: int = 0
    """training seed (data, gold placement, seed_everything)"""
    steps: int = 400
    """continual-training steps"""
    eval_examples: int = 50
    """held-out examples per gold position"""
    threads: int = 1
    """torch threads per command (OMP_NUM_THREADS)"""

    def __post_init__(self) -> None:
        """The domain checks, each a ValueError naming the option (jsonargparse checked the types)."""
        for name in ("steps", "eval_examples", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        if self.seed < 0:
            raise ValueError("--seed must be >= 0")
        if not (Path(self.base) / "config.json").is_file():
            raise ValueError(
                f"--base {self.base!r} is not an HF model directory (make one: scripts/pretrain_tiny_base.py)"
            )


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    add_dataclass_options(parser, TinyDip)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> TinyDip:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return typed_options(build_parser(), argv)


def recipe_settings(args: TinyDip) -> recipe.PositionBias:
    """The position-bias recipe's settings (its defaults: 64 pairs, 8 keys, edges of 4, lr 1e-3) with ours."""
    return recipe.PositionBias(
        base=args.base, steps=args.steps, eval_examples=args.eval_examples, threads=args.threads, seeds=1
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    if out.exists():
        print(f"{out} exists: nothing to do (delete it to make it again)")
        return
    settings = recipe_settings(args)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run = CommandRunner(
        work,
        description="Commands of scripts/make_tiny_dip_base.py, in order.",
        cwd=ROOT,
        fresh=False,
        env={"OMP_NUM_THREADS": str(args.threads)},
    )
    model = recipe.train_model(args.seed, work, run, settings)
    eval_dir = work / "eval" / f"seed{args.seed}"
    timings = evaluate(model, eval_dir, run, settings)
    summary = load_summary(eval_dir / "summary.json")
    text = readme(args, settings, summary, read_records(eval_dir / RECORDS_FILE), timings)
    with atomic_directory(out) as staging:
        for path in sorted(model.iterdir()):
            if path.is_file() and path.name != EXPORT_MANIFEST:  # the export's bookkeeping (a work-dir path) stays
                shutil.copy2(path, staging / path.name)
        (staging / "README.md").write_text(text)
    base = recipe.method_results(summary, METHODS)["baseline"]
    print(f"wrote {out}: baseline accuracy {base['accuracy']:.3f}, middle − edges {base['middle_minus_edges']:+.3f}")


if __name__ == "__main__":
    main()
