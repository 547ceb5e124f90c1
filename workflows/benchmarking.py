"""Side-by-side timing for the benchmarks (`workflows.benchmarks`): run A and B alternately, compare the medians.

Alternating (A, B, A, B, ...) lets both see the same machine state, which on
a shared machine matters more than the number of runs. Each callable times
itself and returns its seconds, so set-up it does around the measured part
(attaching a method, building a trainer) is not counted. `interleave` does
the same for more than two variants, and `trace_allocations` measures the
memory a step allocates on the CPU.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping
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


def interleave(runs: Mapping[str, Callable[[], float]], rounds: int, warmup: int = 0) -> dict[str, list[float]]:
    """Each callable once per round, the order rotated by one each round; seconds of the `rounds` timed ones by name.

    With three or more variants a fixed order would always run one right
    after the same other one; rotating spreads that over all of them. Two
    timed lists of one call give an `Alternation` (paired by round).
    """
    if rounds < 1 or warmup < 0 or not runs:
        raise ValueError(
            f"interleave needs runs, rounds >= 1 and warmup >= 0, got {len(runs)} runs, {rounds}, {warmup}"
        )
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = runs[name]()
            if index >= warmup:
                times[name].append(seconds)
    return times


@dataclass(frozen=True)
class AllocationTrace:
    """CPU bytes allocated above the level at the start, after each allocation or free, in time order.

    `marks` holds the first start time of each named range in the traced call
    (torch ops and `record_function` ranges), so the level at a point of the
    step (e.g. when backward starts: the activations kept for it) can be read off.
    """

    times_ns: list[int]
    totals: list[int]
    marks: dict[str, int]

    @property
    def peak(self) -> int:
        return max(self.totals, default=0)

    def before(self, mark: str) -> int:
        """Bytes allocated just before the range `mark` started."""
        if mark not in self.marks:
            raise KeyError(f"no record_function range {mark!r} in the trace; ranges: {sorted(self.marks)}")
        levels = [total for time, total in zip(self.times_ns, self.totals) if time < self.marks[mark]]
        return levels[-1] if levels else 0


def trace_allocations(run: Callable[[], object]) -> AllocationTrace:
    """Run `run()` under torch.profiler with `profile_memory`; the running sum of what the CPU allocator reported.

    The profiler reports every allocation (+bytes) and free (-bytes) of
    torch's CPU allocator while it runs; their running sum starts at 0, so
    tensors that existed before (weights) are not in it. (The allocator's own
    `total_allocated` in those reports is not: it also carries what earlier
    profiling sessions allocated and never saw freed.) Ranges `run` opens with
    `torch.profiler.record_function` become `marks`.
    """
    from torch._C._profiler import _EventType  # the event tree's node kinds (no public name in torch)
    from torch.profiler import ProfilerActivity, profile  # lazy: the benchmarks' --help answers without torch

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    allocations, marks = [], {}

    def visit(nodes):
        for node in nodes:
            if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
                allocations.append((node.start_time_ns, node.extra_fields.alloc_size))
            elif node.tag == _EventType.TorchOp:
                marks.setdefault(node.name, node.start_time_ns)
            visit(node.children)

    visit(prof.profiler.kineto_results.experimental_event_tree())
    if not allocations:
        raise RuntimeError("torch.profiler reported no CPU allocations: this torch build does not profile memory")
    allocations.sort(key=lambda event: event[0])  # stable: same-time events keep their order
    totals = list(itertools.accumulate(size for _, size in allocations))
    return AllocationTrace([time for time, _ in allocations], totals, marks)


def summary(result: Alternation, name_a: str = "A", name_b: str = "B", unit: str = "s") -> str:
    """Median (min, max) time of each side and the median ratio B/A with its range, one line each."""
    return comparison({name_a: result.a, name_b: result.b}, [(name_a, name_b)], unit)


def comparison(times: Mapping[str, list[float]], pairs: list[tuple[str, str]], unit: str = "s") -> str:
    """Median (min, max) time of each variant, then the median ratio B/A and its range for each pair (A, B).

    `times` as `interleave` returns them: the i-th time of every variant comes
    from round i, so the ratios are taken round by round.
    """
    scale = {"s": 1.0, "ms": 1e3}[unit]
    width = max(len(name) for name in times)
    lines = [
        f"{name:<{width}} median {statistics.median(seconds) * scale:.3f} {unit} "
        f"(min {min(seconds) * scale:.3f}, max {max(seconds) * scale:.3f}, n={len(seconds)})"
        for name, seconds in times.items()
    ]
    for name_a, name_b in pairs:
        result = Alternation(times[name_a], times[name_b])
        ratios = result.ratios
        lines.append(
            f"{name_b} / {name_a} time: median {result.median_ratio:.3f} (per pair {min(ratios):.3f}-{max(ratios):.3f})"
        )
    return "\n".join(lines)
