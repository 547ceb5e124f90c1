"""The Lost in the Middle release's answer scores, for the lm-eval tasks `python -m evaluation lm-eval tasks` writes.

This file is copied next to the task YAMLs (`!function litm_scoring.process_mdqa`), so a task folder runs in any
environment that has lm-eval, without this project: it needs only the standard library and `regex` (a dependency
of lm-eval's sacrebleu). The scores equal `evaluation.metrics.best_subspan_em` and `kv_containment` (a test
checks them on the same strings), which follow the release's `best_subspan_em` and its KV score.
"""

from __future__ import annotations

import string

import regex

_PUNCTUATION = frozenset(string.punctuation)
#: `regex`, not `re`: the release's word boundaries for the articles (they differ from `re`'s on Unicode).
_ARTICLES = regex.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace (the release's order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def best_subspan_em(prediction: str, answers: list[str]) -> float:
    """1.0 when a normalised gold answer is a substring of the normalised prediction (the release's MDQA score)."""
    pred = normalize_answer(prediction).lower()
    return float(any(normalize_answer(answer).lower() in pred for answer in answers))


def kv_containment(prediction: str, answers: list[str]) -> float:
    """1.0 when a gold value occurs in the prediction, case-insensitively (the release's KV-retrieval score)."""
    pred = prediction.lower()
    return float(any(answer.lower() in pred for answer in answers))


def process_mdqa(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's per-document hook of an MDQA task: the generated answer scored against the document's answers."""
    return {"best_subspan_em": best_subspan_em(results[0], doc["answers"])}


def process_kv(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's per-document hook of a KV-retrieval task."""
    return {"kv_containment": kv_containment(results[0], doc["answers"])}
