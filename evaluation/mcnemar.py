"""The exact McNemar test for 0/1 scores (accuracy) against the baseline, clustered by question.

McNemar's exact test compares two systems on the same items by their discordant pairs alone: b items the
method gets right and the baseline wrong, c the other way round. Under "no difference" each discordant item is
a fair coin, so the smaller count is binomial(b + c, 1/2). The harness's prompts are not independent items: one
question is asked with its gold answer at every position. As the bootstrap intervals do, the test takes the
question as its unit: per question the sign of b_q − c_q; questions the method wins and questions the baseline
wins are the coin flips, ties drop out. With one prompt per question this is McNemar's exact test itself.

It answers the question lm-evaluation-harness users ask of accuracy ("is the difference more than chance?")
with an exact, assumption-light test, beside the sign-flip permutation test on mean differences
(`evaluation.statistics.sign_flip_test`), which also covers continuous scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple


class McNemarTest(NamedTuple):
    """The clustered exact McNemar test of one method against the baseline."""

    p_value: float
    method_only: int
    """Prompts the method scores 1 and the baseline 0 (b)."""
    baseline_only: int
    """Prompts the baseline scores 1 and the method 0 (c)."""
    questions_for: int
    """Questions with more method-only than baseline-only prompts."""
    questions_against: int
    """Questions with more baseline-only than method-only prompts."""

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "test": DESCRIPTION}


DESCRIPTION = "exact McNemar test on the discordant pairs, clustered by question (two-sided binomial over questions)"


def binomial_two_sided(wins: int, losses: int) -> float:
    """Two-sided exact p of `wins` against `losses` under a fair coin: 2 P(X <= min) for X ~ Bin(n, 1/2), at most 1."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def is_binary(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every score is 0 or 1 (accuracy), the only scores McNemar's test is defined for."""
    return bool(records) and all(float(r["score"]) in (0.0, 1.0) for r in records)


def clustered_mcnemar(
    records: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]]
) -> McNemarTest | None:
    """The test over the prompts both scored (paired by `id`, clustered by `example_id`); None unless every
    paired score on both sides is 0 or 1."""
    reference = {r["id"]: float(r["score"]) for r in baseline}
    paired = [r for r in records if r["id"] in reference]
    if not paired or not is_binary(paired) or not all(reference[r["id"]] in (0.0, 1.0) for r in paired):
        return None
    by_question: dict[str, int] = {}
    method_only = baseline_only = 0
    for r in paired:
        difference = int(float(r["score"]) - reference[r["id"]])
        method_only += difference == 1
        baseline_only += difference == -1
        key = str(r["example_id"])
        by_question[key] = by_question.get(key, 0) + difference
    wins = sum(1 for d in by_question.values() if d > 0)
    losses = sum(1 for d in by_question.values() if d < 0)
    return McNemarTest(binomial_two_sided(wins, losses), method_only, baseline_only, wins, losses)
