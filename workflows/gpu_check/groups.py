"""The check groups of `check-gpu` on one device, each a list of rows (a group that raises fails one row).

Imported by `workflows.gpu_check.command` once a GPU is there (the tests pass the CPU as the device).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from workflows.gpu_check.harness_tokens import harness_rows
from workflows.gpu_check.positions import position_method_rows, real_model_rows
from workflows.gpu_check.rows import Row, guarded
from workflows.gpu_check.throughput import throughput_rows
from workflows.gpu_check.training_run import training_rows


def run_checks(device: str, checks: list[str], methods: list[str], workdir: Path, options) -> list[Row]:
    """The rows of each group in `checks` (positions: of `methods`), on `device`; a group that raises fails one row."""
    groups = {
        "positions": lambda: position_method_rows(device, workdir, tuple(methods)),
        "real_model": lambda: real_model_rows(device, workdir, options.real_model, tuple(methods)),
        "harness": lambda: harness_rows(device, workdir),
        "training": lambda: training_rows(device, workdir / "training", options.train_processes),
        "throughput": lambda: throughput_rows(
            device, seq_len=options.seq_len, pairs=options.pairs, peak=options.peak_tflops
        ),
    }
    rows: list[Row] = []
    for name in checks:
        start = time.perf_counter()
        print(f"[check-gpu] {name} ...", file=sys.stderr, flush=True)
        rows += guarded(name, groups[name])
        print(f"[check-gpu] {name} done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return rows
