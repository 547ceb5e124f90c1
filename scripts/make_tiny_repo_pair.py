#!/usr/bin/env python
"""Make workflows/assets/tiny-kv-dip-continued: the dip base continued with RoPE and with REPO, same data and steps.

    python scripts/make_tiny_repo_pair.py [--out workflows/assets/tiny-kv-dip-continued] \
        [--work outputs/tiny-pair-work]

REPO's predictors start as the paper's do (normal, std 0.02, cut at 3), so its
positions start near 0 and take hundreds of steps to spread (docs/training.md,
"Why REPO's positions start near 0"): more than the quickstart's 5-minute
budget on a CPU. So the pair is trained once, here, and shipped, as
workflows/assets/tiny-kv-dip is: the quickstart continues both models for its
own few steps and shows REPO's learned positions next to RoPE continued on the same
data for the same steps, both against the base they came from.

Recipe: the quickstart's (workflows/quickstart/tiny_loop.py, `training_config`):
the edge-gold KV streams of workflows/position_bias.py (data seed 0),
batch 32, lr 1e-3 with warm-up and linear decay, `python -m repo_train fit`
then `export`; REPO with the curriculum z <- (1 - p) z + p i, p from 1 to 0
over the first `--curriculum_steps`. Measured and written to OUT/README.md and
OUT/pair.json: each model's last logged training losses, REPO's per-head
position spans on one evaluation prompt, and the baseline accuracy by gold
position of the base and both models on held-out prompts.

Every step whose output exists in WORK is skipped (rerun = resume). OUT is
written at once (a staging directory moved into place); an existing OUT is left
alone: delete it to remake.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from evaluation.results import load_summary
from repo_common.atomic import atomic_directory, write_json_atomic
from repo_common.config_cli import ConfigParser, add_dataclass_options, typed_options
from repo_train.export_directory import EXPORT_MANIFEST
from workflows import position_bias as recipe
from workflows.assets import TINY_KV_DIP, TINY_KV_DIP_CONTINUED
from workflows.commands import CommandRunner, last_checkpoint, logged_train_losses
from workflows.quickstart.resume import training_resume
from workflows.quickstart.tiny_loop import plot_repo_positions, training_config

ROOT = Path(__file__).resolve().parents[1]
OUT = TINY_KV_DIP_CONTINUED
PROG = "scripts/make_tiny_repo_pair.py"
METHODS = ("rope", "repo")
#: The training data's seed; the quickstart continues the pair on another seed's streams.
DATA_SEED = 0


@dataclass
class TinyRepoPair:
    """The pair's options (each also a key of a `--config` file), judged when built."""

    out: str = str(OUT)
    """directory of the pair (left alone if it exists)"""
    work: str = "outputs/tiny-pair-work"
    """training and evaluation outputs (resumes)"""
    base: str = str(TINY_KV_DIP)
    """RoPE HF model both continue"""
    steps: int = 600
    """training steps of each model"""
    curriculum_steps: int = 100
    """REPO: steps over which linear positions hand over"""
    eval_examples: int = 30
    """held-out questions per gold position"""
    threads: int = 1
    """torch threads per command (OMP_NUM_THREADS)"""

    def __post_init__(self) -> None:
        """Each refusal a ValueError naming the option (jsonargparse checked the types)."""
        for name in ("steps", "eval_examples", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        if not 0 <= self.curriculum_steps <= self.steps:
            raise ValueError(f"--curriculum_steps must be in [0, --steps={self.steps}]")
        if not (Path(self.base) / "config.json").is_file():
            raise ValueError(
                f"--base {self.base!r} is not an HF model directory (make one: scripts/make_tiny_dip_base.py)"
            )


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    add_dataclass_options(parser, TinyRepoPair)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> TinyRepoPair:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return typed_options(build_parser(), argv)


def settings_for(args: TinyRepoPair) -> recipe.PositionBias:
    """The quickstart's tiny-loop settings at this script's steps and evaluation size."""
    return recipe.PositionBias(base=args.base, seeds=1, steps=args.steps, eval_examples=args.eval_examples)


def train(method: str, work: Path, data: Path, args, settings, run: CommandRunner) -> Path:
    """Train and export one model (skipped when its export exists); its HF directory."""
    model = work / "models" / method
    if (model / "config.json").is_file():
        return model
    config_path = training_config(work, method, data, settings)
    config = yaml.safe_load(config_path.read_text())
    config["trainer"]["log_every_n_steps"] = max(1, min(10, args.steps // 3))  # a loss to report in short runs too
    if method == "repo":
        curriculum = {"curriculum_start": 1.0, "curriculum_steps": args.curriculum_steps}
        config["model"]["position"] = {
            "class_path": "RepoPosition",
            "init_args": curriculum if args.curriculum_steps else {},
        }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    run_dir = work / "runs" / method
    resume = training_resume(run_dir) or []
    run(
        f"train {method}",
        "repo_train",
        "fit",
        "--config",
        str(config_path),
        *resume,
        log=work / "logs" / f"train-{method}.log",
    )
    run(
        f"export {method}",
        "repo_train",
        "export",
        "--checkpoint",
        str(last_checkpoint(run_dir)),
        "--out",
        str(model),
        "--tokenizer",
        args.base,
        log=work / "logs" / f"export-{method}.log",
    )
    return model


def accuracy_by_position(model: Path, eval_dir: Path, settings, run: CommandRunner, name: str) -> dict[str, float]:
    """Baseline accuracy per gold position on the quickstart's held-out prompts (skipped once summarized)."""
    if not (eval_dir / "summary.json").is_file():
        command = recipe.eval_command(model, eval_dir, ["baseline"], settings)
        run(f"evaluate {name}", *command, log=eval_dir.parent / "logs" / f"eval-{name}.log")
    result = next(iter(load_summary(eval_dir / "summary.json")["results"]["kv"].values()))
    return {position: cell["accuracy"] for position, cell in result["by_position"].items()}


def last_losses(run_dir: Path, count: int = 5) -> list[float]:
    losses = logged_train_losses(run_dir)
    return [losses[step] for step in sorted(losses)[-count:]]


def readme(args, measured: dict) -> str:
    command = [
        "python",
        "scripts/make_tiny_repo_pair.py",
        "--steps",
        str(args.steps),
        "--curriculum_steps",
        str(args.curriculum_steps),
        "--eval_examples",
        str(args.eval_examples),
        "--threads",
        str(args.threads),
    ]
    spans = measured["repo_spans"]
    positions = sorted(measured["accuracy"]["base"], key=int)
    lines = [
        "# tiny-kv-dip-continued",
        "",
        (
            f"`workflows/assets/tiny-kv-dip` continued for {args.steps} steps with RoPE (`rope/`) and with REPO "
            "(`repo/`) on the same data: the quickstart's edge-gold KV streams (batch 32, lr 1e-3). REPO's predictors start as the "
            f"paper's (normal, std 0.02, cut at 3) with the curriculum z ← (1 − p) z + p·i, p from 1 to 0 over the "
            f"first {args.curriculum_steps} steps. Made by this project (same licence as the code); no external data. "
            "The quickstart continues both for its own steps (docs/training.md)."
        ),
        "",
        "```bash",
        f"OMP_NUM_THREADS={args.threads} {shlex.join(command)}",
        "```",
        "",
        "## Measured",
        "",
        "Last logged training losses:",
        "",
        *(f"- {m}: " + ", ".join(f"{x:.3f}" for x in measured["losses"][m]) for m in METHODS),
        "",
        (
            f"REPO's per-head position spans (max − min of z) on one {measured['tokens']}-token evaluation prompt "
            f"(RoPE's span: {measured['tokens'] - 1}):"
        ),
        "",
        "| layer | " + " | ".join(f"head {h}" for h in range(len(next(iter(spans.values()))))) + " |",
        "|---|" + "---|" * len(next(iter(spans.values()))),
        *(f"| {layer} | " + " | ".join(f"{s:.1f}" for s in heads) + " |" for layer, heads in spans.items()),
        "",
        f"Baseline accuracy by gold position, {args.eval_examples} held-out questions each:",
        "",
        "| model | " + " | ".join(positions) + " |",
        "|---|" + "---|" * len(positions),
        *(
            f"| {name} | " + " | ".join(f"{acc[p]:.2f}" for p in positions) + " |"
            for name, acc in measured["accuracy"].items()
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out, work = Path(args.out), Path(args.work)
    if out.exists():
        print(f"{out} exists; delete it to remake the pair")
        return
    work.mkdir(parents=True, exist_ok=True)
    settings = settings_for(args)
    run = CommandRunner(work, cwd=ROOT, env={"OMP_NUM_THREADS": str(args.threads)}, fresh=False)
    data = work / "data" / "kv-train.jsonl"
    if not data.is_file():
        recipe.write_training_data(data, DATA_SEED, settings)
    models = {method: train(method, work, data, args, settings, run) for method in METHODS}
    _, positions = plot_repo_positions(work, models["repo"], settings)
    measured = {
        "steps": args.steps,
        "curriculum_steps": args.curriculum_steps,
        "data_seed": DATA_SEED,
        "losses": {m: last_losses(work / "runs" / m) for m in METHODS},
        "tokens": positions["tokens"],
        "repo_spans": {str(layer): spans for layer, spans in positions["spans"].items()},
        "accuracy": {
            name: accuracy_by_position(model, work / "eval" / name, settings, run, name)
            for name, model in {"base": Path(args.base), **models}.items()
        },
    }
    with atomic_directory(out) as staging:
        for method, model in models.items():
            (staging / method).mkdir()
            for file in model.iterdir():
                if file.is_file() and file.name != EXPORT_MANIFEST:  # the export's bookkeeping (a work-dir path)
                    (staging / method / file.name).write_bytes(file.read_bytes())
        write_json_atomic(staging / "pair.json", measured, indent=1)
        (staging / "README.md").write_text(readme(args, measured))
    print(f"wrote {out}")
    print(json.dumps({k: measured[k] for k in ("losses", "repo_spans", "accuracy")}, indent=1))


if __name__ == "__main__":
    main()
