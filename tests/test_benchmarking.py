"""The A/B helper of the benchmark scripts: alternation order, warm-up, ratio arithmetic (fake clocks, no timing)."""

import pytest

from repo_train.scripting.benchmarking import Alternation, alternate, summary


def _fake(name: str, seconds: list[float], log: list[str]):
    """A callable that logs its name and returns the next of `seconds`."""
    values = iter(seconds)

    def run() -> float:
        log.append(name)
        return next(values)

    return run


def test_runs_alternate_and_warm_up_pairs_are_dropped():
    log: list[str] = []
    result = alternate(_fake("a", [9.0, 2.0, 4.0, 5.0], log), _fake("b", [9.0, 3.0, 2.0, 10.0], log), pairs=3, warmup=1)
    assert log == ["a", "b"] * 4
    assert result == Alternation(a=[2.0, 4.0, 5.0], b=[3.0, 2.0, 10.0])


def test_ratios_are_b_over_a_per_pair():
    result = Alternation(a=[2.0, 4.0, 5.0], b=[3.0, 2.0, 10.0])
    assert result.ratios == [1.5, 0.5, 2.0]
    assert result.median_ratio == 1.5
    assert result.best_ratio == 1.0  # min(b) / min(a) = 2 / 2
    assert Alternation(a=[1.0, 4.0], b=[3.0, 4.0]).median_ratio == 2.0  # even count: mean of the middle two


def test_summary_reports_medians_and_the_median_ratio():
    text = summary(Alternation(a=[0.002, 0.004, 0.005], b=[0.003, 0.002, 0.010]), "rope", "repo", unit="ms")
    assert text.splitlines() == [
        "rope median 4.000 ms (min 2.000, max 5.000, n=3)",
        "repo median 3.000 ms (min 2.000, max 10.000, n=3)",
        "repo / rope time: median 1.500 (per pair 0.500-2.000)",
    ]


def test_no_timed_pair_is_an_error():
    with pytest.raises(ValueError, match="pairs >= 1"):
        alternate(float, float, pairs=0)
