"""Side-by-side timing for the scripts/benchmark_*.py: run A and B alternately, compare the medians.

Alternating (A, B, A, B, ...) lets both see the same machine state, which on
a shared machine matters more than the number of runs. Each callable times
itself and returns its seconds, so set-up it does around the measured part
(attaching a method, building a trainer) is not counted.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Alternation:
    """Seconds of A and of B, one of each per timed pair, in run order."""

    a: list[float]
    b: list[float]

    @property
    def ratios(self) -> list[float]:
        """B's time / A's time, per pair."""
        return [b / a for a, b in zip(self.a, self.b)]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def best_ratio(self) -> float:
        """B's best (minimum) time / A's: the ratio least disturbed by other jobs."""
        return min(self.b) / min(self.a)


def alternate(a: Callable[[], float], b: Callable[[], float], pairs: int, warmup: int = 0) -> Alternation:
    """Run a(), b(), a(), b(), ...: `warmup` untimed pairs, then `pairs` timed ones; each call returns its seconds."""
    if pairs < 1 or warmup < 0:
        raise ValueError(f"alternate needs pairs >= 1 and warmup >= 0, got pairs={pairs}, warmup={warmup}")
    times_a: list[float] = []
    times_b: list[float] = []
    for index in range(warmup + pairs):
        seconds_a, seconds_b = a(), b()
        if index >= warmup:
            times_a.append(seconds_a)
            times_b.append(seconds_b)
    return Alternation(times_a, times_b)


def summary(result: Alternation, name_a: str = "A", name_b: str = "B", unit: str = "s") -> str:
    """Median (min, max) time of each side and the median ratio B/A with its range, one line each."""
    scale = {"s": 1.0, "ms": 1e3}[unit]
    width = max(len(name_a), len(name_b))
    lines = [
        f"{name:<{width}} median {statistics.median(times) * scale:.3f} {unit} "
        f"(min {min(times) * scale:.3f}, max {max(times) * scale:.3f}, n={len(times)})"
        for name, times in ((name_a, result.a), (name_b, result.b))
    ]
    ratios = result.ratios
    lines.append(
        f"{name_b} / {name_a} time: median {result.median_ratio:.3f} (per pair {min(ratios):.3f}-{max(ratios):.3f})"
    )
    return "\n".join(lines)
