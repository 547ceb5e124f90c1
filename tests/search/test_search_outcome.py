"""`search.outcome`: a search whose result does not beat the unscaled model says so, with the numbers."""

from __future__ import annotations

from search import search_run
from search.outcome import every_candidate_scored, outcome_of, search_outcome
from search.search_run import _print_summary


def result(overall: float) -> dict:
    return {"overall": overall, "per_subset": {"begin": overall, "middle": overall, "end": overall}}


HELD = {"num_examples": 500, "baseline": result(0.25), "pi_mean": {"scale": 1.4, **result(0.2)}, "lpes": result(0.15)}


def test_a_held_out_score_below_the_unscaled_model_is_a_warning_with_both_numbers():
    """The user report: the best candidate at 0.15 against the unscaled model's 0.25, written without a word."""
    outcome = search_outcome(result(0.4), result(0.3), HELD, left_start=False, start_scale=1.5)
    assert outcome["compared_on"] == "held-out" and outcome["beats_unscaled"] is False
    assert (outcome["lpes"], outcome["unscaled"]) == (0.15, 0.25)  # the held-out numbers, not the search set's
    assert outcome["warning"] == (
        "the searched scales score below the unscaled model on the 500 held-out questions: LPES 0.1500, unscaled "
        "0.2500; this file is not expected to help"
    )


def test_without_a_held_out_check_the_search_set_decides_and_a_tie_does_not_beat():
    outcome = search_outcome(result(0.3), result(0.3), None)
    assert outcome["compared_on"] == "search set" and outcome["beats_unscaled"] is False
    assert outcome["warning"].startswith("the searched scales score the same as the unscaled model on the search set")
    better = search_outcome(result(0.35), result(0.3), None, left_start=False)
    assert better["beats_unscaled"] is True and better["warning"] is None


def test_a_search_that_never_left_its_start_or_told_no_candidate_apart_says_so():
    history = [{"best": 0.0, "population_best": 0.0, "population_mean": 0.0}] * 3
    assert every_candidate_scored(history) == 0.0
    assert every_candidate_scored([*history, {"best": 0.1, "population_best": 0.1, "population_mean": 0.05}]) is None
    zero = {**HELD, "baseline": result(0.0), "lpes": result(0.0)}
    outcome = search_outcome(result(0.0), result(0.0), zero, left_start=True, start_scale=1.5, all_scored=0.0)
    assert outcome["left_start"] is True and outcome["every_candidate_scored"] == 0.0
    warning = outcome["warning"]
    assert "every candidate scored 0.0000 on the search set, so the fitness told none apart" in warning
    assert "the search never left its start (the same scale 1.5 on every layer): it is PI at that scale" in warning
    # beating the unscaled model does not hide that the result is PI at the start's scale
    ahead = search_outcome(result(0.3), result(0.2), None, left_start=True, start_scale=1.5)
    assert ahead["beats_unscaled"] is True and "never left its start" in ahead["warning"]


def test_an_older_scale_file_gets_the_comparison_recomputed():
    search = {"held_out": HELD, "unscaled_fitness": result(0.3)}
    assert outcome_of(search, result(0.4))["beats_unscaled"] is False
    assert outcome_of({}, result(0.4))["beats_unscaled"] is None  # nothing to compare with: no claim either way
    stored = {"outcome": {"beats_unscaled": True, "warning": None}}
    assert outcome_of(stored, result(0.4)) == stored["outcome"]


def test_the_search_prints_its_warning_last_on_stderr(capsys, monkeypatch):
    # the evaluation command it prints reads the scale file, which this summary only names
    monkeypatch.setattr(search_run, "load_scale_file", lambda path: {"path": path})
    monkeypatch.setattr(search_run, "print_evaluation_command", lambda data, path: print(f"evaluate {path}"))
    outcome = search_outcome(result(0.4), result(0.3), HELD)
    summary = {"fitness": result(0.4), "unscaled_fitness": result(0.3), "generations": 2, "held_out": {
        "example_offset": 200, "seed": 0, **HELD}, "scales": [1.5, 1.2], "evaluations": 10,
        "paths": {key: key for key in ("scale", "log", "curve", "fitness", "state", "config")}, "outcome": outcome}  # fmt: skip
    _print_summary(summary, 1.0)
    captured = capsys.readouterr()
    assert captured.err == f"warning: {outcome['warning']}\n" and "warning" not in captured.out
    assert captured.out.endswith("evaluate scale\n")
    _print_summary({**summary, "outcome": {**outcome, "warning": None}}, 1.0)
    assert capsys.readouterr().err == ""
