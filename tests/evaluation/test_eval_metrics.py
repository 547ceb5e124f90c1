"""Answer metrics on cases computed by hand."""

from __future__ import annotations

import pytest

from evaluation.metrics import (
    METRICS,
    accuracy,
    best_subspan_em,
    exact_match,
    get_metric,
    normalize_answer,
    rouge_l,
    rouge_scores,
    substring_match,
    token_f1,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Eiffel-Tower!", "eiffeltower"),  # punctuation deleted (not spaced), article dropped
        ("An apple a day, the end.", "apple day end"),
        ("The theater and Anthem", "theater and anthem"),  # articles only as whole words
        ("  Wilhelm\tConrad\nRöntgen ", "wilhelm conrad röntgen"),
        ("a", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_best_subspan_em() -> None:
    answers = ["Wilhelm Conrad Röntgen"]
    assert best_subspan_em("It was Wilhelm Conrad Röntgen, in 1901.", answers) == 1.0
    assert best_subspan_em("wilhelm conrad röntgen", answers) == 1.0
    assert best_subspan_em("Röntgen", answers) == 0.0  # the answer must be inside the prediction, not vice versa
    assert best_subspan_em("Röntgen", ["Marie Curie", "Röntgen"]) == 1.0  # any answer
    # hyphens are deleted, so a spaced prediction does not match a hyphenated answer (release behaviour)
    assert best_subspan_em("the Eiffel Tower", ["Eiffel-Tower"]) == 0.0
    assert best_subspan_em("The Eiffel-Tower!", ["eiffeltower"]) == 1.0


def test_exact_and_substring_match() -> None:
    assert exact_match("The Eiffel Tower.", ["eiffel tower"]) == 1.0
    assert exact_match("the Eiffel Tower in Paris", ["eiffel tower"]) == 0.0
    assert substring_match("It is in Paris.", ["Paris"]) == 1.0
    assert substring_match("it is in paris", ["Paris"]) == 0.0  # case-sensitive, no normalisation
    assert substring_match("a-b", ["a b"]) == 0.0


def test_token_f1_partial_overlap() -> None:
    # pred tokens [cat, sat, quietly, on, mat], gold [cat, sat, on, hat]: 3 common -> P=3/5, R=3/4
    # F1 = 2 * 0.6 * 0.75 / 1.35 = 2/3; the second answer (1 common) scores lower, so max = 2/3
    score = token_f1("The cat sat quietly on the mat", ["a cat sat on the hat", "dog"])
    assert score == pytest.approx(2 / 3)
    assert token_f1("cat cat", ["cat"]) == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # counts clip the overlap
    assert token_f1("", ["the"]) == 1.0  # both normalize to nothing: SQuAD counts that as agreement
    assert token_f1("dog", ["cat"]) == 0.0


def test_rouge_on_tiny_case() -> None:
    # pred [the, cat, sat] vs ref [the, cat, on, the, mat]: LCS "the cat" = 2 -> P=2/3, R=2/5, F=0.5
    # unigram overlap also 2 -> ROUGE-1 0.5; bigrams: 1 shared of 2 vs 4 -> P=1/2, R=1/4, F=1/3
    scores = rouge_scores("the cat sat", ["the cat on the mat", "dogs bark"])
    assert scores["rouge1"] == pytest.approx(0.5)
    assert scores["rouge2"] == pytest.approx(1 / 3)
    assert scores["rougeL"] == pytest.approx(0.5)
    assert rouge_l("the cat sat", ["the cat sat"]) == pytest.approx(1.0)


def test_accuracy_and_registry() -> None:
    preds = ["Paris", "London", "It is Rome."]
    golds = [["Paris"], ["Berlin"], ["rome"]]
    assert accuracy(preds, golds) == pytest.approx(2 / 3)
    assert accuracy(preds, golds, metric=substring_match) == pytest.approx(1 / 3)
    assert get_metric("token_f1") is token_f1
    assert set(METRICS) >= {"best_subspan_em", "exact_match", "substring_match", "token_f1", "rouge_l"}


def test_metric_errors() -> None:
    with pytest.raises(TypeError, match=r"answers must be a list of strings.*wrap it"):
        best_subspan_em("Paris", "Paris")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"answers is empty"):
        token_f1("Paris", [])
    with pytest.raises(ValueError, match=r"2 predictions but 1 answer lists"):
        accuracy(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"unknown metric 'bleu'; choose one of"):
        get_metric("bleu")
