"""A warning when torch's CPU threads will fight other work for the cores.

torch runs one intra-op thread per core. When other processes already keep the cores busy, those threads
wait on each other at every parallel op, and a small model trains many times slower than on free cores
(measured: the tiny `fit`, 30 steps on 2 cores with a load of about 4, 62.5 s with 2 threads, 18.3 s with 1).
One thread avoids the waits; the line says so before the run starts, once.
"""

from __future__ import annotations

import os


def busy_cores_warning(threads: int, load: float | None = None, cores: int | None = None) -> str | None:
    """The one-line advice when `threads` torch threads would share `cores` with a `load` (1-minute load
    average) already above what the cores can take; None when they would not, or when it cannot tell."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # not on every platform
            return None
    cores = cores or os.cpu_count() or 1
    if threads <= 1 or load < cores:
        return None
    return (
        f"note: the CPU is busy (load {load:.1f} on {cores} cores) and torch runs {threads} threads, which then "
        "wait on each other: set OMP_NUM_THREADS=1 (or fewer threads than free cores) for a faster run"
    )
