"""Both sides timed on the same batches, alternating, after the untimed comparison pair."""

from __future__ import annotations

import statistics
from typing import Any

from evaluation.runner import PreparedTask
from workflows.benchmarking import alternate


def run_record(prepared: PreparedTask, seconds_ours: float, seconds_theirs: float, timing) -> dict[str, Any]:
    """What both scores' reports hold alike: the untimed pair's seconds, the timed rounds, the prompts' sizes."""
    lengths = [len(p.input_ids) for p in prepared.prompts]
    return {
        "untimed_pair_seconds": {"ours": seconds_ours, "lm_eval": seconds_theirs},
        "timing": timing,
        "prompts": {
            "count": len(lengths),
            "tokens_min": min(lengths),
            "tokens_max": max(lengths),
            "tokens_mean": statistics.fmean(lengths),
        },
    }


def timed_rounds(run_a, run_b, first: tuple, comparable, repeats: int, log=print) -> dict[str, Any] | None:
    """`repeats` alternating rounds of ours (`run_a`) and lm-eval's (`run_b`), each `() -> (seconds, outputs)`,
    after the untimed pair whose outputs are `first`; whether each side's outputs stayed the same (`comparable`
    turns ours into what is compared), and lm-eval's time / ours. None without rounds."""
    if not repeats:
        return None
    stable = {"ours": True, "lm_eval": True}

    def time_ours() -> float:
        seconds, out = run_a()
        stable["ours"] &= comparable(out) == first[0]
        return seconds

    def time_theirs() -> float:
        seconds, out = run_b()
        stable["lm_eval"] &= out == first[1]
        return seconds

    runs = alternate(time_ours, time_theirs, repeats)
    log(f"ours    median {statistics.median(runs.a):.2f}s (min {min(runs.a):.2f}s, n={repeats})")
    log(f"lm-eval median {statistics.median(runs.b):.2f}s (min {min(runs.b):.2f}s, n={repeats})")
    log(
        f"lm-eval time / ours: median {runs.median_ratio:.3f} (per round {min(runs.ratios):.3f}-"
        f"{max(runs.ratios):.3f}), min/min {runs.best_ratio:.3f}; > 1 means ours is faster"
    )
    return {
        "rounds": repeats,
        "order": "ours, lm-eval, ours, lm-eval, ... (after the untimed comparison pair)",
        "ours_seconds": runs.a,
        "lm_eval_seconds": runs.b,
        "ratios_lm_eval_over_ours": runs.ratios,
        "median_ratio": runs.median_ratio,
        "min_time_ratio": runs.best_ratio,
        "ratio_range": [min(runs.ratios), max(runs.ratios)],
        "outputs_stable_across_rounds": stable,
    }
