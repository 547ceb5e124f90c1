"""The clustered exact McNemar test: McNemar's exact test itself with one prompt a question, a binomial sign
test over questions otherwise, and only for 0/1 scores."""

from __future__ import annotations

import itertools
import math

import pytest

from evaluation.mcnemar import binomial_two_sided, clustered_mcnemar
from evaluation.results import compare_with_baseline


def _records(scores: dict[tuple[int, int], float], method: str) -> list[dict]:
    return [
        {"id": f"q{q}-p{p}", "example_id": f"q{q}", "method": method, "score": score}
        for (q, p), score in sorted(scores.items())
    ]


def _binomial_by_enumeration(wins: int, losses: int) -> float:
    """Two-sided exact p by listing every outcome no likelier than the observed one (an independent route)."""
    n = wins + losses
    if n == 0:
        return 1.0
    observed = math.comb(n, wins)
    return min(1.0, sum(math.comb(n, k) for k in range(n + 1) if math.comb(n, k) <= observed) / 2**n)


@pytest.mark.parametrize(("wins", "losses"), [(0, 0), (1, 0), (5, 0), (3, 3), (7, 2), (2, 9), (30, 12), (0, 20)])
def test_the_binomial_p_equals_the_sum_over_no_likelier_outcomes(wins, losses):
    assert binomial_two_sided(wins, losses) == pytest.approx(_binomial_by_enumeration(wins, losses), rel=1e-12)


def test_textbook_values():
    assert binomial_two_sided(0, 5) == pytest.approx(2 / 32)  # every discordant pair one way
    assert binomial_two_sided(1, 9) == pytest.approx(2 * 11 / 1024)
    assert binomial_two_sided(4, 4) == 1.0


def test_with_one_prompt_a_question_it_is_mcnemars_exact_test():
    method = {(q, 0): float(q % 3 != 0) for q in range(30)}
    baseline = {(q, 0): float(q % 2 == 0) for q in range(30)}
    test = clustered_mcnemar(_records(method, "m"), _records(baseline, "baseline"))
    b = sum(1 for k in method if method[k] == 1 and baseline[k] == 0)
    c = sum(1 for k in method if method[k] == 0 and baseline[k] == 1)
    assert (test.method_only, test.baseline_only) == (b, c) == (test.questions_for, test.questions_against)
    assert test.p_value == pytest.approx(_binomial_by_enumeration(b, c))


def test_questions_are_the_unit():
    """A question whose positions disagree both ways counts once, by the sign of its balance; ties drop out."""
    method, baseline = {}, {}
    for q, p in itertools.product(range(6), range(4)):
        baseline[(q, p)] = 0.0
        method[(q, p)] = 1.0 if q < 5 and p < 2 else 0.0  # questions 0-4 win on two positions each
    baseline[(5, 0)], method[(5, 1)] = 1.0, 1.0  # question 5: one each way, a tie
    test = clustered_mcnemar(_records(method, "m"), _records(baseline, "baseline"))
    assert (test.method_only, test.baseline_only) == (11, 1)
    assert (test.questions_for, test.questions_against) == (5, 0)
    assert test.p_value == pytest.approx(2 / 32)  # five questions, not twelve prompts


def test_only_for_scores_of_zero_or_one():
    scores = {(q, 0): 0.5 for q in range(4)}
    assert clustered_mcnemar(_records(scores, "m"), _records(scores, "baseline")) is None
    summary = compare_with_baseline(_records(scores, "m"), _records(scores, "baseline"), n_resamples=50)
    assert "mcnemar" not in summary


def test_the_summary_names_the_test_beside_the_sign_flip_p():
    method = {(q, p): float(q < 8) for q in range(10) for p in range(3)}
    baseline = {(q, p): float(q < 2) for q in range(10) for p in range(3)}
    vs = compare_with_baseline(_records(method, "m"), _records(baseline, "baseline"), n_resamples=50)
    assert vs["mcnemar"]["test"].startswith("exact McNemar test on the discordant pairs, clustered by question")
    assert vs["mcnemar"]["p_value"] == pytest.approx(2 / 2**6)  # six questions won, none lost
    assert vs["test"].startswith("two-sided paired sign-flip test")
