"""REPO's learned positions on one evaluation prompt: the plot per head of the last REPO layer, and the spans.

The quickstart's report says whether REPO's positions spread at all in the steps it trained (they start near
0: docs/training.md), so its `repo` row is read as REPO and not as a model that sees almost no order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from evaluation.head_position_plot import plot_head_positions
from evaluation.model_loading import load_model
from evaluation.tasks import build_task
from repo_train.modeling import record_positions
from workflows import position_bias as recipe


def plot_repo_positions(out: Path, model_dir: Path, settings: argparse.Namespace) -> tuple[Path, dict]:
    """Positions per head of the last REPO layer on one evaluation prompt (REPO paper's position figures),
    and how far each REPO layer's positions spread: {"tokens", "start_layer", "spans": per layer, per head}."""
    model, tokenizer = load_model(str(model_dir))
    params = {**recipe.kv_params(settings), "num_examples": 1, "gold_positions": 0, "seed": recipe.EVAL_SEED}
    row = next(iter(build_task("kv", **params).rows()))
    ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
    with torch.no_grad(), record_positions(model) as recorder:
        model(ids)
    start = model.config.repo_start_layer
    learned = {layer: p for layer, p in enumerate(recorder.positions) if p is not None and layer >= start}
    path = out / "repo_positions_last_layer.png"
    plot_head_positions(learned[max(learned)], title="REPO positions per head, last layer, one KV prompt", path=path,
                        detail_tokens=30)  # fmt: skip
    spans = {
        layer: [float(head.max() - head.min()) for head in positions.reshape(-1, positions.shape[-1])]
        for layer, positions in learned.items()
    }
    return path, {"tokens": ids.shape[1], "start_layer": start, "spans": spans}
