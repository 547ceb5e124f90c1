#!/usr/bin/env python
"""REPO §5.2 analyses of a trained REPO model: position range per head and chunk patterns, with plots.

    python scripts/analyze_repo_positions.py --model outputs/reversal/models/repo-seed0 \\
        --task reversal --task_param min_length=20 --task_param max_length=20 --out outputs/repo-positions

Runs the model on prompts of one harness task (built with the model's own
tokenizer), records the positions z every REPO layer assigns
(`repo_train.modeling.record_positions`) and reports, per layer and head, the
range max z − min z and the shares of 16-token chunks that are constant,
monotonic or hybrid (`evaluation.repo_position_stats`, whose docstring states the
thresholds). Writes OUT/positions.json, OUT/positions.md, a range heat map
(layer × head) and the positions of every head of every REPO layer for the first
prompt, in the style of the paper's position figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonargparse.typing import PositiveInt

from evaluation.tasks import build_task
from repo_common.atomic import save_figure_atomic, write_json_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, add_dataclass_options, config_values, dump_config, typed_options

#: `torch.Tensor` in the annotations, without importing torch (--help answers without it; a TYPE_CHECKING import
#: would not do: jsonargparse runs those blocks when it reads the options' dataclass).
Tensor = Any

PROG = "scripts/analyze_repo_positions.py"


@dataclass
class RepoPositions:
    """The analysis's options (each also a key of a `--config` file), judged when built."""

    model: str
    """HF directory of a REPO model (with its tokenizer)"""
    out: str
    """output directory (created)"""
    task: str = "kv"
    """harness task whose prompts are fed (default kv)"""
    task_param: list[str] = field(default_factory=list)
    """task parameters KEY=VALUE (on the command line: --task_param KEY=VALUE, repeatable)"""
    num_examples: PositiveInt = 8
    """prompts to record (per task row grid)"""
    seed: int = 0
    """seed of the task's prompts"""

    def __post_init__(self) -> None:
        """A malformed --task_param is a usage error before the model loads."""
        _task_params(self.task_param)


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    add_dataclass_options(parser, RepoPositions)
    parser.repeatable = ("task_param",)
    return parser


def parse_args(argv: list[str] | None = None) -> RepoPositions:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return typed_options(build_parser(), argv)


def _task_params(pairs: list[str]) -> dict:
    """`KEY=VALUE` strings as task parameters (integers as int); a ValueError names a malformed one."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--task_param expects KEY=VALUE, got {pair!r}")
        params[key] = int(value) if value.lstrip("-").isdigit() else value
    return params


def record(model, tokenizer, prompts: list[str]) -> list[list[Tensor | None]]:
    """REPO positions per prompt and layer, None for other layers (one forward per prompt: no padding)."""
    import torch  # lazy: --help answers without torch

    from repo_train.modeling import RepoPolicy, layer_policies, record_positions  # lazy: --help without torch

    is_repo = [isinstance(policy, RepoPolicy) for policy in layer_policies(model)]
    out = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad(), record_positions(model) as recorder:
            model(ids)
        out.append([p[0].float() if repo else None for p, repo in zip(recorder.positions, is_repo)])
    return out


def summarize(per_prompt: list[list[Tensor | None]]) -> list[dict | None]:
    """Per layer: per-head range and pattern shares, averaged over prompts (each prompt weighs its chunks)."""
    import torch  # lazy: --help answers without torch

    from evaluation.repo_position_stats import PATTERNS, position_statistics  # lazy: --help answers without torch

    layers = []
    for layer in range(len(per_prompt[0])):
        if per_prompt[0][layer] is None:
            layers.append(None)
            continue
        stats = [s for s in position_statistics([p[layer] for p in per_prompt]) if s is not None]
        chunks = torch.tensor([s.num_chunks for s in stats], dtype=torch.float64)
        weights = chunks / chunks.sum()
        entry = {"range": torch.stack([s.range for s in stats]).mean(0).tolist(), "chunks": int(chunks.sum())}
        for name in PATTERNS:
            entry[name] = (torch.stack([getattr(s, name) for s in stats]) * weights[:, None]).sum(0).tolist()
        layers.append(entry)
    return layers


def markdown(layers: list[dict | None], args: RepoPositions, tokens: list[int]) -> str:
    from evaluation.repo_position_stats import CHUNK, PATTERNS  # lazy: --help answers without torch

    lines = [
        "# REPO positions per head",
        "",
        (
            f"Model `{args.model}`, {len(tokens)} `{args.task}` prompts of {min(tokens)}–{max(tokens)} tokens. "
            f"Range = max z − min z per head (mean over prompts); shares of {CHUNK}-token chunks that are "
            "constant (all within ±0.2 of the chunk mean), monotonic or hybrid (evaluation/repo_position_stats.py)."
        ),
        "",
        "| layer | head | range | constant | monotonic | hybrid |",
        "|---|---|---|---|---|---|",
    ]
    for index, entry in enumerate(layers):
        if entry is None:
            continue
        for head, spread in enumerate(entry["range"]):
            shares = " | ".join(f"{entry[name][head]:.2f}" for name in PATTERNS)
            lines.append(f"| {index} | {head} | {spread:.2f} | {shares} |")
    repo = [e for e in layers if e is not None]
    overall = {name: sum(sum(e[name]) for e in repo) / sum(len(e[name]) for e in repo) for name in PATTERNS}
    lines += ["", "All REPO heads: " + ", ".join(f"{name} {share:.2f}" for name, share in overall.items())]
    return "\n".join(lines) + "\n"


def plot_ranges(layers: list[dict | None], path: Path) -> Path:
    from matplotlib.figure import Figure  # lazy: --help answers without matplotlib

    rows = [(i, e["range"]) for i, e in enumerate(layers) if e is not None]
    fig = Figure(figsize=(1.0 + 0.6 * len(rows[0][1]), 0.8 + 0.5 * len(rows)), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow([r for _, r in rows], aspect="auto", cmap="viridis")
    ax.set_yticks(range(len(rows)), [str(i) for i, _ in rows])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title("REPO position range (max z − min z)")
    fig.colorbar(image, ax=ax)
    return save_figure_atomic(fig, path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from evaluation.head_position_plot import plot_head_positions  # lazy: --help answers without torch
    from evaluation.model_loading import load_model

    out = Path(args.out)
    model, tokenizer = load_model(args.model)
    task = build_task(args.task, num_examples=args.num_examples, seed=args.seed, **_task_params(args.task_param))
    prompts = [row["prompt"] for row in task.rows()][: args.num_examples]
    per_prompt = record(model, tokenizer, prompts)
    if all(p is None for p in per_prompt[0]):
        raise SystemExit(f"{args.model} has no REPO layer: nothing to analyse (train with model.position: repo)")
    layers = summarize(per_prompt)
    tokens = [next(p for p in positions if p is not None).shape[-1] for positions in per_prompt]
    write_json_atomic(
        out / "positions.json", {"model": args.model, "task": args.task, "tokens": tokens, "layers": layers}
    )
    write_text_atomic(out / "positions.md", markdown(layers, args, tokens))
    plot_ranges(layers, out / "ranges.png")
    write_text_atomic(out / "config.yaml", dump_config(config_values(args)))  # --config replays it
    for index, positions in enumerate(per_prompt[0]):
        if positions is not None:
            figure = plot_head_positions(positions, title=f"REPO positions, layer {index}, first prompt")
            save_figure_atomic(figure, out / f"positions-layer{index}.png")
    print(f"wrote {out / 'positions.md'}")


if __name__ == "__main__":
    main()
