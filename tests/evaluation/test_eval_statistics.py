"""Clustered uncertainty, the paired sign-flip test, Holm, and the summary that uses them.

References are independent of the code under test: a binomial sign test computed with
math.comb, the normal approximation of a mean's interval, Holm's rule applied by hand.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from evaluation.report import render_report
from evaluation.results import (
    FORMAT_VERSION,
    ResultsFormatError,
    build_summary,
    comparison_verdict,
    load_summary,
    read_records,
    resummarize,
    summarize_group,
    write_json_atomic,
)
from evaluation.statistics import (
    EXACT_SIGN_FLIP_MAX,
    HELPS,
    HURTS,
    IDENTICAL,
    NO_ANSWERS,
    NO_CHANGE,
    bootstrap_ci,
    holm_adjust,
    mean_std_over_seeds,
    sign_flip_test,
    verdict,
)

POSITIONS = 8


def record(question: int, position: int, score: float, method: str = "baseline", task: str = "kv") -> dict:
    return {
        "id": f"q{question:03d}-p{position}",
        "example_id": f"q{question:03d}",  # zero-padded: sorted ids = question order
        "task": task,
        "method": method,
        "gold_position": position,
        "num_positions": POSITIONS,
        "prediction": "",
        "answers": ["x"],
        "score": float(score),
        "prompt_tokens": 10,
        "truncated": False,
    }


def grid(score_of, questions: int = 50, method: str = "baseline") -> list[dict]:
    """Every question at every position, scored by `score_of(question, position)`."""
    return [record(q, p, score_of(q, p), method) for q in range(questions) for p in range(POSITIONS)]


def binomial_sign_test(k: int, m: int) -> float:
    """Two-sided exact sign test: P(|B - m/2| >= |k - m/2|) for B ~ Binomial(m, 1/2)."""
    observed = abs(k - m / 2)
    return sum(math.comb(m, b) for b in range(m + 1) if abs(b - m / 2) >= observed - 1e-12) / 2**m


# --- clustered intervals -------------------------------------------------------------------------


def test_accuracy_interval_resamples_questions_not_rows() -> None:
    # 50 questions whose score does not depend on position: 50 independent units, not 400
    records = grid(lambda q, p: q < 25)
    result = summarize_group(records, None)
    low, high = result["accuracy_ci"]
    assert result["n"] == 400 and result["n_examples"] == 50
    normal_width = 2 * 1.96 * math.sqrt(0.25 / 50)  # the interval of a mean of 50 independent 0/1 scores
    assert 0.8 * normal_width < high - low < 1.2 * normal_width
    rows = bootstrap_ci([r["score"] for r in records])  # what resampling rows would claim
    assert (high - low) / (rows.high - rows.low) > 2.2  # ≈ √8 too narrow


def test_balanced_cluster_interval_equals_the_bootstrap_of_question_means() -> None:
    rng = np.random.default_rng(3)
    table = rng.random((40, POSITIONS)) < np.linspace(0.9, 0.4, 40)[:, None]
    result = summarize_group(grid(lambda q, p: table[q, p], questions=40), None, seed=5)
    means = bootstrap_ci(table.mean(axis=1), seed=5)  # same seed: the same questions are drawn
    assert result["accuracy"] == pytest.approx(means.mean, rel=1e-12)
    assert result["accuracy_ci"] == pytest.approx([means.low, means.high], rel=1e-9)


def test_middle_minus_edges_and_rho_get_clustered_intervals() -> None:
    u_curve = [1.0, 0.4, 0.3, 0.3, 0.3, 0.3, 0.4, 1.0]
    rng = np.random.default_rng(0)
    draws = rng.random((60, POSITIONS))
    result = summarize_group(grid(lambda q, p: draws[q, p] < u_curve[p], questions=60), None)
    low, high = result["middle_minus_edges_ci"]
    assert low < result["middle_minus_edges"] < high < 0
    rho_low, rho_high = result["rho_ci"]
    assert 0 < rho_low < result["rho"] < rho_high <= 100
    assert result["shape"] == "U" and result["worst_position"] in range(1, 7)


# --- the paired test -----------------------------------------------------------------------------


@pytest.mark.parametrize("m, k", [(5, 5), (12, 9), (EXACT_SIGN_FLIP_MAX, 15), (EXACT_SIGN_FLIP_MAX, 10)])
def test_exact_sign_flip_on_unit_differences_is_the_binomial_sign_test(m, k) -> None:
    differences = [1.0] * k + [-1.0] * (m - k) + [0.0] * 7  # zeros do not count
    result = sign_flip_test(differences)
    assert result.exact and result.n_nonzero == m
    assert result.p_value == pytest.approx(binomial_sign_test(k, m), rel=1e-12)


def test_monte_carlo_sign_flip_agrees_with_the_exact_test() -> None:
    m, k = 40, 27
    result = sign_flip_test([1.0] * k + [-1.0] * (m - k), n_permutations=20_000, seed=1)
    exact = binomial_sign_test(k, m)
    assert not result.exact
    assert abs(result.p_value - exact) < 4 * math.sqrt(exact * (1 - exact) / 20_000) + 1e-4


def test_p_value_is_two_sided_and_one_for_identical_scores() -> None:
    base = grid(lambda q, p: q % 2 == 0)
    better = grid(lambda q, p: q % 2 == 0 or q % 4 == 1, method="better")  # fixes half the errors
    worse = grid(lambda q, p: q % 4 == 0, method="worse")  # breaks half the successes
    same = grid(lambda q, p: q % 2 == 0, method="same")
    up = summarize_group(better, base)["vs_baseline"]
    down = summarize_group(worse, base)["vs_baseline"]
    tie = summarize_group(same, base)["vs_baseline"]
    assert up["mean_diff"] == pytest.approx(13 / 50) and down["mean_diff"] == pytest.approx(-12 / 50)
    assert up["p_value"] < 0.001 and down["p_value"] < 0.001  # a far worse method is not "p = 1"
    assert up["low"] > 0 and down["high"] < 0
    assert tie["p_value"] == 1.0 and tie["identical"] and not up["identical"]
    assert up["n"] == 400 and up["n_examples"] == 50 and "sign-flip" in up["test"]


def test_paired_interval_is_clustered() -> None:
    base = grid(lambda q, p: 0)
    method = grid(lambda q, p: q < 10, method="m")  # 10 questions fixed at every position
    vs = summarize_group(method, base)["vs_baseline"]
    normal_width = 2 * 1.96 * math.sqrt(0.2 * 0.8 / 50)
    assert 0.75 * normal_width < vs["high"] - vs["low"] < 1.25 * normal_width


def test_holm_by_hand() -> None:
    p = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}
    # sorted: d 0.005*4 = 0.02; a 0.01*3 = 0.03; c 0.03*2 = 0.06; b 0.04*1 = 0.04 -> running max 0.06
    assert holm_adjust(p) == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert holm_adjust({"x": 0.7, "y": 0.8}) == {"x": 1.0, "y": 1.0}
    assert holm_adjust({}) == {}


def test_summary_adds_holm_over_the_methods_of_a_task() -> None:
    base = grid(lambda q, p: q % 2 == 0)
    better = grid(lambda q, p: q % 2 == 0 or q % 4 == 1, method="better")
    same = grid(lambda q, p: q % 2 == 0, method="same")
    summary = build_summary(base + better + same, {"name": "m"}, {"kv": {}}, ["baseline", "better", "same"])
    results = summary["results"]["kv"]
    raw = {m: results[m]["vs_baseline"]["p_value"] for m in ("better", "same")}
    assert {m: results[m]["vs_baseline"]["p_holm"] for m in raw} == pytest.approx(holm_adjust(raw))
    assert results["baseline"]["vs_baseline"] is None
    assert summary["format_version"] == FORMAT_VERSION == 2 and summary["bootstrap"]["unit"] == "example_id"


def test_flat_curve_has_no_worst_position() -> None:
    result = summarize_group(grid(lambda q, p: 1.0), None)
    assert result["shape"] == "flat" and result["worst_position"] is None
    ramp = [0.05, 0.08, 0.12, 0.15, 0.20, 0.23, 0.70, 0.93]
    draws = np.random.default_rng(1).random((100, POSITIONS))
    ramped = summarize_group(grid(lambda q, p: draws[q, p] < ramp[p], questions=100), None)
    assert ramped["shape"] == "ramp up" and ramped["rho"] > 0


def test_mean_std_over_seeds() -> None:
    result = mean_std_over_seeds([0.5, 0.6, 0.7])
    assert result == pytest.approx((0.6, 0.1, 3))
    assert math.isnan(mean_std_over_seeds([0.5]).std)
    with pytest.raises(ValueError, match=r"got no values"):
        mean_std_over_seeds([])


def test_bootstrap_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        bootstrap_ci([1.0, 0.0], alpha=1.5)
    with pytest.raises(ValueError, match=r"n_resamples must lie in \[1, 1,000,000\], got 0"):
        summarize_group(grid(lambda q, p: 1.0), None, n_resamples=0)
    with pytest.raises(ValueError, match=r"got 10000000000; 1000 is usual"):  # refused before any memory is taken
        bootstrap_ci([1.0, 0.0], n_resamples=10**10)


# --- verdicts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "low, high, p_holm, identical, expected",
    [
        (0.01, 0.20, 0.010, False, HELPS),
        (-0.20, -0.01, 0.010, False, HURTS),
        (0.01, 0.20, 0.060, False, NO_CHANGE),  # interval above 0, but p (Holm) not below 0.05
        (-0.01, 0.20, 0.001, False, NO_CHANGE),  # p small, but the interval reaches 0
        (-0.20, 0.00, 0.001, False, NO_CHANGE),  # an interval ending at 0 is not below it
        (0.0, 0.0, 1.0, True, IDENTICAL),
        (None, None, 0.001, False, NO_CHANGE),  # undefined interval
        (0.01, 0.20, math.nan, False, NO_CHANGE),
    ],
)
def test_verdict_rule(low, high, p_holm, identical, expected) -> None:
    assert verdict(low, high, p_holm, identical) == expected


def test_degenerate_comparisons_get_their_own_verdicts() -> None:
    """Equal because nothing could differ, or because the method said nothing, is not "identical"."""
    assert verdict(0.0, 0.0, 1.0, True, constant=0.0) == "uninformative (every score 0)"
    assert verdict(0.0, 0.0, 1.0, True, constant=1.0) == "uninformative (every score 1)"
    assert verdict(-0.5, -0.2, 0.001, False, no_answers=True) == NO_ANSWERS  # its scores do not matter
    assert verdict(0.0, 0.0, 1.0, True, constant=0.0, no_answers=True) == NO_ANSWERS


def _answered(records: list[dict], answer) -> list[dict]:
    """`records` as the runner writes generated ones: a stop reason and `answer(record)` as the prediction."""
    return [{**r, "prediction": answer(r), "stop_reason": "eos"} for r in records]


def test_every_score_zero_or_every_answer_empty_is_not_identical() -> None:
    """The user report: a method that answered nothing on every prompt, against a baseline that scored 0 everywhere,
    was "identical"; so was one that answered but was never right. Equal, non-degenerate scores stay identical."""
    zero = lambda q, p: 0.0
    base = _answered(grid(zero, questions=20), lambda r: "wrong")
    methods = {
        "silent": _answered(grid(zero, questions=20, method="silent"), lambda r: ""),
        "wrong": _answered(grid(zero, questions=20, method="wrong"), lambda r: "also wrong"),
    }
    records = base + [r for group in methods.values() for r in group]
    results = build_summary(records, {"name": "m"}, {"kv": {}}, ["baseline", *methods])["results"]["kv"]
    assert results["silent"]["vs_baseline"]["verdict"] == NO_ANSWERS
    assert results["silent"]["vs_baseline"]["middle"]["verdict"] == NO_ANSWERS
    assert results["silent"]["empty_answers"] == 20 * POSITIONS and results["baseline"]["empty_answers"] == 0
    assert results["wrong"]["vs_baseline"]["verdict"] == "uninformative (every score 0)"
    assert results["wrong"]["vs_baseline"]["constant_score"] == 0.0
    # a real baseline: the silent method hurts, and is still named for what it did
    right = _answered(grid(lambda q, p: q % 2 == 0, questions=20), lambda r: "x")
    silent = build_summary(right + methods["silent"], {"name": "m"}, {"kv": {}}, ["baseline", "silent"])
    assert silent["results"]["kv"]["silent"]["vs_baseline"]["verdict"] == NO_ANSWERS
    same = _answered(grid(lambda q, p: q % 2 == 0, questions=20, method="same"), lambda r: "x")
    equal = build_summary(right + same, {"name": "m"}, {"kv": {}}, ["baseline", "same"])["results"]["kv"]["same"]
    assert equal["vs_baseline"]["verdict"] == IDENTICAL and equal["vs_baseline"]["constant_score"] is None


def test_a_gold_log_likelihood_run_has_no_answers_to_miss() -> None:
    """`--score gold_loglik` writes an empty prediction for every prompt (nothing is generated): not "no answers"."""
    forced = lambda group: [{**r, "stop_reason": "forced", "score": -1.0 - r["gold_position"] / 10} for r in group]
    base = forced(grid(lambda q, p: 0.0, questions=10))
    other = [{**r, "score": r["score"] - 0.5} for r in forced(grid(lambda q, p: 0.0, questions=10, method="m"))]
    result = build_summary(base + other, {"name": "m"}, {"kv": {}}, ["baseline", "m"])["results"]["kv"]["m"]
    assert result["empty_answers"] is None and result["vs_baseline"]["no_answers"] is False
    assert result["vs_baseline"]["verdict"] == HURTS


def test_verdict_uses_the_given_level() -> None:
    assert verdict(0.01, 0.2, 0.03, False, alpha=0.05) == HELPS
    assert verdict(0.01, 0.2, 0.03, False, alpha=0.01) == NO_CHANGE


def test_summary_gives_verdicts_overall_and_for_the_middle() -> None:
    """Even questions right everywhere, odd ones wrong; methods fix or break a quarter of them, somewhere."""
    base = grid(lambda q, p: q % 2 == 0)
    fixed = lambda q: q % 4 == 1  # 13 of the 25 wrong questions
    methods = {
        "better": lambda q, p: q % 2 == 0 or fixed(q),
        "worse": lambda q, p: q % 4 == 0,  # breaks 12 of the 25 right questions
        "same": lambda q, p: q % 2 == 0,
        "edges_only": lambda q, p: q % 2 == 0 or (fixed(q) and p in (0, POSITIONS - 1)),
        "middle_only": lambda q, p: q % 2 == 0 or (fixed(q) and 0 < p < POSITIONS - 1),
        "two": lambda q, p: q % 2 == 0 or q in (1, 3),  # 2 questions: exact p = 2/4
    }
    records = base + [r for name, score in methods.items() for r in grid(score, method=name)]
    summary = build_summary(records, {"name": "m"}, {"kv": {}}, ["baseline", *methods])
    results = summary["results"]["kv"]
    overall = {m: results[m]["vs_baseline"]["verdict"] for m in methods}
    middle = {m: results[m]["vs_baseline"]["middle"]["verdict"] for m in methods}
    assert overall == {
        "better": HELPS,
        "worse": HURTS,
        "same": IDENTICAL,
        "edges_only": HELPS,
        "middle_only": HELPS,
        "two": NO_CHANGE,
    }
    assert middle == {**overall, "edges_only": IDENTICAL}  # the edges are not the middle
    # the middle comparison pairs only interior prompts: 6 of 8 per question
    edge_free = results["middle_only"]["vs_baseline"]["middle"]
    assert edge_free["n"] == 50 * (POSITIONS - 2) and edge_free["mean_diff"] == pytest.approx(13 / 50)
    # the middle Δs are their own family for Holm
    raw = {m: results[m]["vs_baseline"]["middle"]["p_value"] for m in methods}
    assert {m: results[m]["vs_baseline"]["middle"]["p_holm"] for m in methods} == pytest.approx(holm_adjust(raw))
    # middle and edge accuracy: the two means middle − edges subtracts
    edges = results["edges_only"]
    assert edges["middle_accuracy"] == pytest.approx(0.5) and edges["edges_accuracy"] == pytest.approx(38 / 50)
    assert edges["middle_accuracy"] - edges["edges_accuracy"] == pytest.approx(edges["middle_minus_edges"])
    low, high = edges["edges_accuracy_ci"]
    assert low < 38 / 50 < high


def test_a_stored_verdict_is_read_and_a_missing_one_computed() -> None:
    base = grid(lambda q, p: q % 2 == 0)
    vs = summarize_group(grid(lambda q, p: q % 2 == 0 or q % 4 == 1, method="m"), base)["vs_baseline"]
    assert "verdict" not in vs and "p_holm" not in vs  # Holm and verdicts need the whole task
    assert comparison_verdict(vs) == HELPS  # alone: the raw p is Holm over one comparison
    assert comparison_verdict({**vs, "verdict": HURTS}) == HURTS
    assert comparison_verdict({**vs, "p_holm": 0.2}) == NO_CHANGE
    assert comparison_verdict(None) is None


# --- files: duplicates, versions, seeds ------------------------------------------------------------


def _write_records(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_a_record_written_twice_is_counted_once_or_refused(tmp_path, capsys) -> None:
    records = grid(lambda q, p: 1.0, questions=3)
    path = tmp_path / "records.jsonl"
    _write_records(path, [*records, records[4]])
    assert len(read_records(path)) == len(records)
    assert "records.jsonl:25 repeats line 5 exactly" in capsys.readouterr().err
    _write_records(path, [*records, {**records[4], "score": 0.0}])
    with pytest.raises(ResultsFormatError, match=r"records.jsonl:25 repeats prompt 'q000-p4' .* from line 5"):
        read_records(path)


def _run_dir(tmp_path, name, score_of, version=FORMAT_VERSION):
    out = tmp_path / name
    out.mkdir()
    records = grid(lambda q, p: 1.0, questions=20) + grid(score_of, questions=20, method="pi:scale=2")
    _write_records(out / "records.jsonl", records)
    summary = build_summary(records, {"name": "tiny"}, {"kv": {"metric": "kv_containment"}}, ["baseline", "pi:scale=2"])
    write_json_atomic(out / "summary.json", {**summary, "format_version": version})
    return out


def test_old_summaries_are_refused_with_the_command_that_rebuilds_them(tmp_path) -> None:
    out = _run_dir(tmp_path, "old", lambda q, p: p != 3, version=1)
    with pytest.raises(ResultsFormatError, match=r"format_version 1 .*`python -m evaluation summarize --out DIR`"):
        load_summary(out)
    rebuilt = resummarize(out)
    assert load_summary(out) == json.loads(json.dumps(rebuilt))
    assert rebuilt["results"]["kv"]["pi:scale=2"]["vs_baseline"]["mean_diff"] == pytest.approx(-1 / 8)


@pytest.mark.slow  # three seed runs (~3 s): the fast suite stays under 5 min
def test_report_over_seed_runs_gives_mean_and_sample_std(tmp_path) -> None:
    runs = [_run_dir(tmp_path, f"seed{i}", lambda q, p, i=i: not (p == 3 and q < 5 * (i + 1))) for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        render_report(runs[0], runs[1:], seeds=True)
    text = (runs[0] / "report.md").read_text()
    assert "Over 3 seeds" in text
    # accuracy per seed 31/32, 30/32, 29/32: mean 0.9375, sample std 1/32
    assert "| pi (scale=2) | 3 | 0.938 ± 0.031 |" in text
    # position 3 per seed: 0.75, 0.5, 0.25 -> mean 0.50, sample std 0.25 (population std would be 0.20)
    by_position = next(row for row in text.splitlines() if row.startswith("| pi (scale=2) | 1.00 ± 0.00 |"))
    assert by_position.split(" | ")[4] == "0.50 ± 0.25"
    single = render_report(runs[0])
    assert "Over 3 seeds" not in single[-1].read_text()
    assert "| pi (scale=2) | 3 | 0.938 ± 0.031 | -0.083 ± 0.042 | 50.7 ± 0.0 | -0.062 ± 0.031 " in text
    # 5, 10, 15 questions broken at one position: exact p 2/2^5 = 0.0625 is not below 0.05, the others are
    assert "| hurts ×2, no measurable change ×1 |" in text
