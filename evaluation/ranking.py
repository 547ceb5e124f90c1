"""Ranking documents by attention, and the prompt reorderings Found-in-the-Middle compares with.

- `rank_documents` / `recall_at_k`: order documents by a score (vanilla
  attention Attn(x, k) or calibrated rel(x_k)) and check whether the gold one
  is in the top k (the paper's Table 3 reports Recall@3).
- `attention_sort` (Peysakhovich & Lerer, 2023): score the documents with
  the model's attention in the current order, sort so the most attended
  document comes last, repeat. `calibrated_order` is the one-shot reordering
  by calibrated relevance.
- MDQA helpers rebuild a task row with its documents in a new order (new
  prompt, spans, titles and gold position), since a `Method` acts inside
  one generation and cannot change the prompt the harness tokenised: these
  reorderings are functions a driver applies to rows *before* generation
  (see scripts/benchmark_found_in_middle.py and the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from evaluation.attention_probe import AttentionProbe, install_probe, probe_of, remove_probe
from evaluation.generation import tokenize_prompts
from evaluation.methods.found_in_middle import DUMMY_DOCUMENTS, calibrate_documents, resolve_layers
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt, format_document
from repo_train.modeling.attention import attention_modules

PLACEMENTS = ("last", "first")


def rank_documents(scores: Sequence[float] | torch.Tensor) -> list[int]:
    """Document indices by decreasing score; ties keep the earlier document first (deterministic)."""
    values = scores.tolist() if isinstance(scores, torch.Tensor) else list(scores)
    return sorted(range(len(values)), key=lambda i: (-values[i], i))


def recall_at_k(ranking: Sequence[int], gold_index: int, k: int) -> float:
    """1.0 when `gold_index` is among the first `k` entries of `ranking`, else 0.0 (average over examples)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if gold_index not in ranking:
        raise ValueError(f"gold document {gold_index} is not in the ranking {list(ranking)}")
    return float(gold_index in list(ranking)[:k])


def order_by_score(scores: Sequence[float], placement: str = "last") -> list[int]:
    """Slots reordered: most attended last (attention sorting's choice, nearest the question) or first.

    Equal scores keep their relative order either way.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {list(PLACEMENTS)}, got {placement!r}")
    values = list(scores)
    if placement == "first":
        return rank_documents(values)
    return sorted(range(len(values)), key=lambda i: (values[i], i))


def attention_sort(
    num_documents: int,
    score: Callable[[list[int]], Sequence[float]],
    iterations: int = 1,
    placement: str = "last",
) -> list[int]:
    """Attention sorting: `order[j]` = original document shown in slot j after `iterations` rounds.

    `score(order)` returns one attention value per *slot* of the prompt
    arranged as `order`. Each round reorders by those values; equal scores
    keep their current relative order, so the result is deterministic.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    order = list(range(num_documents))
    for _ in range(iterations):
        values = list(score(order))
        if len(values) != num_documents:
            raise ValueError(f"score returned {len(values)} values for {num_documents} documents")
        order = [order[slot] for slot in order_by_score(values, placement)]
    return order


# -- MDQA rows ---------------------------------------------------------------------------------------------------


def mdqa_documents(row: Mapping[str, Any]) -> list[Passage]:
    """The passages of an MDQA row, read back from its prompt, spans and titles."""
    passages = []
    for index, ((start, end), title) in enumerate(zip(row["item_spans"], row["doc_titles"])):
        line = row["prompt"][start:end]
        head = format_document(index, Passage(title, ""))
        if not line.startswith(head):
            raise ValueError(f"row {row.get('id')!r}: document {index} does not start with {head!r}; not an MDQA row?")
        passages.append(Passage(title, line[len(head) :]))
    return passages


def reorder_mdqa_row(row: Mapping[str, Any], order: Sequence[int]) -> dict[str, Any]:
    """The row with document `order[j]` in slot j: new prompt, spans, titles, gold position, and the order."""
    documents = mdqa_documents(row)
    if sorted(order) != list(range(len(documents))):
        raise ValueError(f"order {list(order)} is not a permutation of the row's {len(documents)} documents")
    prompt, spans = build_mdqa_prompt(row["question"], [documents[i] for i in order])
    return {
        **row,
        "prompt": prompt,
        "item_spans": spans,
        "doc_titles": [documents[i].title for i in order],
        "gold_position": list(order).index(row["gold_position"]),
        "order": [int(i) for i in order],
    }


@contextmanager
def _probe(model) -> Iterator[AttentionProbe]:
    """The model's installed probe, or one installed for this block."""
    if hasattr(attention_modules(model)[0], "attention_probe"):
        yield probe_of(model)
        return
    probe = install_probe(model)
    try:
        yield probe
    finally:
        remove_probe(model)


def mdqa_document_scores(
    model,
    tokenizer,
    rows: Sequence[Mapping[str, Any]],
    calibrated: bool = False,
    score_layers: str = "all",
    dummy: str = "mdqa",
    chunk_size: int = 0,
) -> list[list[float]]:
    """Per row, one score per document slot: Attn(x, k) (vanilla) or rel(x_k) = Attn(x_k, k) − Attn(x_dum, k)."""
    prompts = tokenize_prompts(tokenizer, [r["prompt"] for r in rows], [r["item_spans"] for r in rows])
    if any(len(p.item_spans) != len(r["item_spans"]) for p, r in zip(prompts, rows)):
        raise ValueError("document token spans need a fast tokenizer (offset mapping)")
    layers = resolve_layers(score_layers, len(attention_modules(model)))
    template = DUMMY_DOCUMENTS.get(dummy, dummy)
    dummy_ids = None
    if calibrated:
        dummy_ids = [
            [
                tokenizer(template.format(k=k + 1), add_special_tokens=False)["input_ids"]
                for k in range(len(p.item_spans))
            ]
            for p in prompts
        ]
    with _probe(model) as probe:
        result = calibrate_documents(model, probe, prompts, layers, tokenizer.pad_token_id, dummy_ids, chunk_size)
    scores = result.relevance if calibrated else result.attention
    return [scores[i, : len(p.item_spans)].tolist() for i, p in enumerate(prompts)]


def attention_sort_mdqa(
    model, tokenizer, row: Mapping[str, Any], iterations: int = 1, placement: str = "last", **score_kwargs
) -> dict[str, Any]:
    """The MDQA row after attention sorting (vanilla attention, one prefill per round)."""

    def score(order: list[int]) -> list[float]:
        return mdqa_document_scores(model, tokenizer, [reorder_mdqa_row(row, order)], **score_kwargs)[0]

    return reorder_mdqa_row(row, attention_sort(len(row["item_spans"]), score, iterations, placement))


def calibrated_order(
    model, tokenizer, row: Mapping[str, Any], placement: str = "last", **score_kwargs
) -> dict[str, Any]:
    """The MDQA row reordered once by calibrated relevance (most relevant `placement`)."""
    relevance = mdqa_document_scores(model, tokenizer, [row], calibrated=True, **score_kwargs)[0]
    return reorder_mdqa_row(row, order_by_score(relevance, placement))
