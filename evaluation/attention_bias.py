"""The positional attention bias of a model, measured as Found in the Middle (Hsieh et al., 2024) does.

Their Figures 2-3: with the gold document moved through every position, the
attention the last prompt token pays to it, averaged over the heads of the
later layers, traces a U when the model is lost in the middle. Here:

- one prefill per prompt (no generation), attention rows read by the probe
  (`evaluation.attention_probe`: only the current query's row, never L×L);
- per document, the per-token mean weight (the paper's Attn(x, k), as
  `found_in_middle.document_attention` computes it for the calibration) and
  the total weight (mass) on its tokens;
- per row, the gold document's values at its position, and every document's
  values at theirs (a relevance-free view: the mean over all documents at a
  position, gold or not).

`attention_by_position` returns per-row records; `bias_curve` pools them by
position with a bootstrap over questions (the cluster), as the harness's
statistics do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from evaluation.attention_probe import probing
from evaluation.methods.decoding import collate
from evaluation.methods.found_in_middle import (
    document_attention,
    document_index,
    document_masses,
    last_token_rows,
    resolve_layers,
)
from repo_common.progress import track
from repo_train.modeling.swapping import current_policies


def _num_layers(model) -> int:
    config = model.config.get_text_config(decoder=True)
    return int(getattr(config, "num_hidden_layers", len(current_policies(model))))


@torch.no_grad()
def attention_by_position(model, tokenizer, prepared, layers: str = "last_half", progress: bool | str = False):
    """Per row of a prepared task (`evaluation.runner.prepare_task`, a task with item spans): the attention of
    the last prompt token on each document, averaged over the heads of `layers`, from one prefill per batch.

    Returns dicts with id, example_id, gold_position, num_positions, `mean` (per-token mean weight per
    document, the paper's Attn) and `mass` (total weight per document), lists in document order.
    """
    chosen = resolve_layers(layers, _num_layers(model))
    if not chosen:
        raise ValueError(f"layers={layers!r} selects no layer; use last_half, all, last_N or a range a-b")
    if any(not prompt.item_spans for prompt in prepared.prompts):
        raise ValueError(f"task {prepared.name!r} has no item spans; the attention bias needs documents (mdqa, kv)")
    records: list[dict[str, Any]] = []
    device = next(model.parameters()).device
    with probing(model) as probe:
        for indices in track(prepared.plan, f"{prepared.name} / attention bias", unit="batch", mode=progress):
            prompts = [prepared.prompts[i] for i in indices]
            batch = collate(prompts, tokenizer.pad_token_id, device)
            rows = last_token_rows(model, probe, batch, chosen)  # [B, K] each: the last token's row
            num_docs = max(len(p.item_spans) for p in prompts)
            index = document_index(batch.item_token_spans, batch.input_ids.shape[1])
            mean = document_attention(rows, index, num_docs)
            mass = document_masses(torch.stack([r.float() for r in rows]).mean(dim=0), index, num_docs)[:, :num_docs]
            for b, i in enumerate(indices):
                row, docs = prepared.rows[i], len(prompts[b].item_spans)
                records.append(
                    {
                        "id": row["id"],
                        "example_id": row["example_id"],
                        "gold_position": int(row["gold_position"]),
                        "num_positions": int(row["num_positions"]),
                        "mean": mean[b, :docs].tolist(),
                        "mass": mass[b, :docs].tolist(),
                    }
                )
    order = {row["id"]: n for n, row in enumerate(prepared.rows)}
    return sorted(records, key=lambda r: order[r["id"]]), chosen


def _cluster_bootstrap(values: dict[str, list[float]], resamples: int, seed: int) -> tuple[float, float, float]:
    """(mean, 2.5%, 97.5%) of the mean over clusters (questions), resampling clusters."""
    clusters = [np.mean(v) for v in values.values()]
    if not clusters:
        return float("nan"), float("nan"), float("nan")
    data = np.asarray(clusters)
    rng = np.random.default_rng(seed)
    draws = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    return float(data.mean()), float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))


def bias_curve(records: Sequence[dict[str, Any]], key: str = "mean", resamples: int = 1000, seed: int = 0):
    """Per position: the gold document's attention (`key`: mean or mass) and every document's, with 95% CIs
    from a bootstrap over questions. Returns {"gold": [...], "all_documents": [...]}, one entry per position."""
    if key not in ("mean", "mass"):
        raise ValueError(f"key must be 'mean' or 'mass', got {key!r}")
    positions = sorted({r["gold_position"] for r in records})
    width = max((len(r[key]) for r in records), default=0)
    gold: dict[int, dict[str, list[float]]] = {p: {} for p in positions}
    every: dict[int, dict[str, list[float]]] = {p: {} for p in range(width)}
    for r in records:
        gold[r["gold_position"]].setdefault(r["example_id"], []).append(r[key][r["gold_position"]])
        for p, value in enumerate(r[key]):
            every[p].setdefault(r["example_id"], []).append(value)

    def entry(position: int, by_question: dict[str, list[float]]) -> dict[str, Any]:
        mean, low, high = _cluster_bootstrap(by_question, resamples, seed)
        return {"position": position, "value": mean, "ci": [low, high], "questions": len(by_question)}

    return {
        "gold": [entry(p, gold[p]) for p in positions],
        "all_documents": [entry(p, every[p]) for p in range(width)],
    }
