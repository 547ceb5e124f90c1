"""Answer metrics: one prediction string against the list of gold answers of an example.

Every metric has the signature `metric(prediction, answers) -> float` (the best
score over the gold answers), so a task or a harness config can name one from
`METRICS` and swap it without other changes.

Each rule is also a local `evaluate` metric module (`evaluation/metric_modules/`,
shipped with the package), which delegates to the function here: `score_batch`
scores a batch through it, and users load the same module by path to score their
own predictions (docs/evaluation.md). The Hub's `evaluate.load("squad")` /
`evaluate.load("rouge")` are scripts fetched at load time, so they fail offline
(CI, a compute node without internet) and can change under a fixed version of
this project; ROUGE calls the installed `rouge_score` package (the
implementation the Hub's ROUGE wraps) directly.

The normalisation is the one of the "Lost in the Middle" release (Liu et al.,
TACL 2024; `src/lost_in_the_middle/metrics.py`), the SQuAD one except that
articles are removed with the third-party `regex` module instead of `re`: the
two disagree on word boundaries next to combining marks, joiners and
superscripts, so `re` would score some Unicode answers differently from the
release. Its "best subspan exact match" is the release's multi-document QA
score; KV retrieval is scored by case-insensitive containment of the value
(`kv_containment`, the release's `scripts/evaluate_kv_responses.py`).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import regex

if TYPE_CHECKING:
    import evaluate
    from rouge_score import rouge_scorer

Metric = Callable[[str, Sequence[str]], float]

_PUNCTUATION = frozenset(string.punctuation)
#: `regex`, not `re`, as in the release: `re` counts superscripts ("²") as word characters and combining
#: marks / joiners as non-word ones, `regex` the reverse, so "a²" keeps its article under `re` and loses it here.
_ARTICLES = regex.compile(r"\b(a|an|the)\b")
#: SQuAD's own script (and LongBench's copy of it) uses `re`: its F1 and exact match keep that behaviour.
_ARTICLES_SQUAD = re.compile(r"\b(a|an|the)\b")
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the (whole words), collapse whitespace.

    Punctuation is deleted, not replaced by a space ("Eiffel-Tower" -> "eiffeltower"),
    and the steps run in that order with the release's `regex` word boundaries, so
    every string normalizes as in the release and scores stay comparable.
    """
    return _normalize(text, _ARTICLES)


def normalize_answer_squad(text: str) -> str:
    """`normalize_answer` with `re` word boundaries, as SQuAD's and LongBench's scripts normalize for F1 / EM."""
    return _normalize(text, _ARTICLES_SQUAD)


def _normalize(text: str, articles) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = articles.sub(" ", text)
    return " ".join(text.split())


def _check_answers(answers: Sequence[str]) -> Sequence[str]:
    """Reject a bare string: iterating it would score against single characters."""
    if isinstance(answers, str):
        raise TypeError(f"answers must be a list of strings, got the string {answers!r}; wrap it: [{answers!r}]")
    if len(answers) == 0:
        raise ValueError("answers is empty: an example needs at least one gold answer to be scored")
    return answers


def best_subspan_em(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when any normalized gold answer is a substring of the normalized prediction (the release's score).

    As in the release, an answer that normalizes to "" (e.g. "The") matches every prediction.
    """
    # The release lower-cases both normalized strings once more; a no-op with today's Unicode tables
    # (lower() is idempotent), kept so a future table where it is not cannot split us from the release.
    pred = normalize_answer(prediction).lower()
    return float(any(normalize_answer(answer).lower() in pred for answer in _check_answers(answers)))


def kv_containment(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when a gold answer occurs in the prediction, case-insensitively, with no other normalisation.

    The release's KV-retrieval score (`scripts/evaluate_kv_responses.py`: value.lower() in
    model_answer.lower()). `best_subspan_em` would be laxer on KV values: it deletes punctuation
    (UUID "a-b" matches a response "ab") and drops article-like values ("A" normalizes to "",
    which matches every response).
    """
    pred = prediction.lower()
    return float(any(answer.lower() in pred for answer in _check_answers(answers)))


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the normalized prediction equals a normalized gold answer (SQuAD's normalisation)."""
    pred = normalize_answer_squad(prediction)
    return float(any(normalize_answer_squad(answer) == pred for answer in _check_answers(answers)))


def substring_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when a gold answer occurs verbatim (case-sensitive, no normalisation) in the prediction.

    Stricter than `best_subspan_em`; useful for exact strings such as the UUIDs of KV retrieval.
    """
    return float(any(answer in prediction for answer in _check_answers(answers)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:  # SQuAD convention: two empty answers agree
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD-style bag-of-tokens F1 on normalized whitespace tokens, the best over the gold answers."""
    pred_tokens = normalize_answer_squad(prediction).split()
    return max(_f1(pred_tokens, normalize_answer_squad(answer).split()) for answer in _check_answers(answers))


@lru_cache(maxsize=4)
def _rouge_scorer(use_stemmer: bool) -> rouge_scorer.RougeScorer:
    from rouge_score import rouge_scorer  # heavy: keeps --help fast (nltk, scikit-learn)

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)


def rouge_scores(prediction: str, references: Sequence[str], use_stemmer: bool = False) -> dict[str, float]:
    """ROUGE-1/2/L F-measures, each the best over the references (maximised per ROUGE type).

    `rouge_score`'s default tokenizer lower-cases and keeps only [a-z0-9] runs, so
    text without ASCII letters or digits scores 0 against everything.
    """
    scorer = _rouge_scorer(use_stemmer)
    best = dict.fromkeys(ROUGE_TYPES, 0.0)
    for reference in _check_answers(references):
        scores = scorer.score(reference, prediction)  # rouge_score's order: (target, prediction)
        for name in ROUGE_TYPES:
            best[name] = max(best[name], scores[name].fmeasure)
    return best


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L F-measure alone, in the common `Metric` signature."""
    return rouge_scores(prediction, references)["rougeL"]


def accuracy(predictions: Sequence[str], answers: Sequence[Sequence[str]], metric: Metric = best_subspan_em) -> float:
    """Mean of `metric` over paired predictions and answer lists (best-subspan EM by default)."""
    if len(predictions) != len(answers):
        raise ValueError(
            f"accuracy got {len(predictions)} predictions but {len(answers)} answer lists; pass one answer list "
            "per prediction, in the same order"
        )
    if len(predictions) == 0:
        raise ValueError("accuracy of zero predictions is undefined; pass at least one prediction")
    return sum(metric(p, a) for p, a in zip(predictions, answers, strict=True)) / len(predictions)


METRICS: dict[str, Metric] = {
    "best_subspan_em": best_subspan_em,
    "kv_containment": kv_containment,
    "exact_match": exact_match,
    "substring_match": substring_match,
    "token_f1": token_f1,
    "rouge_l": rouge_l,
}


def get_metric(name: str) -> Metric:
    """The metric registered under `name`, with an error listing the valid names."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; choose one of {sorted(METRICS)}") from None


#: The `evaluate` module (a directory of evaluation/metric_modules) and the per-row key of each metric of METRICS
#: that is not the module's only score ("rouge_l" is the rougeL of the ROUGE module).
MODULE_OF: dict[str, tuple[str, str | None]] = {
    **{name: (name, None) for name in METRICS if name != "rouge_l"},
    "rouge_l": ("rouge", "rougeL"),
}


@cache
def metric_module(name: str) -> evaluate.EvaluationModule:
    """The local `evaluate` metric module `name` (see `evaluation.metric_modules`), loaded once per process.

    Loaded by absolute path with `local_files_only`, so loading never reaches for the network, and kept in
    memory, so scoring writes no cache files. One instance per process: `compute` is not thread-safe.
    """
    import evaluate  # imports transformers' pipelines (seconds alone): only once something scores through it
    from datasets import DownloadConfig  # heavy: with evaluate, only once something scores through it

    from evaluation.metric_modules import module_dir  # heavy: imports datasets; only when scoring

    offline = DownloadConfig(local_files_only=True)
    return evaluate.load(str(module_dir(name)), keep_in_memory=True, download_config=offline)


def score_batch(name: str, predictions: Sequence[str], answers: Sequence[Sequence[str]]) -> list[float]:
    """Per-row scores of the metric `name` of METRICS, computed by its `evaluate` module in one `compute` call.

    Equal to `[get_metric(name)(p, a) for p, a in zip(predictions, answers)]` (the module calls that
    function); batched because each `compute` costs 10-25 ms of Arrow bookkeeping, hundreds of rows' scoring.
    """
    if name not in MODULE_OF:
        raise ValueError(f"unknown metric {name!r}; choose one of {sorted(METRICS)}")
    if len(predictions) != len(answers):
        raise ValueError(
            f"score_batch got {len(predictions)} predictions but {len(answers)} answer lists; pass one answer list "
            "per prediction, in the same order"
        )
    if len(predictions) == 0:
        return []
    module, key = MODULE_OF[name]
    rows = metric_module(module).compute(predictions=list(predictions), references=list(answers), per_row=True)
    return [row[key] for row in rows["per_row"]] if key else rows["per_row"]
