#!/usr/bin/env python
"""First thing to run on a new GPU node: every GPU path of the project, one table, exit code 0 if all pass.

    python scripts/check_gpu.py [--checks positions,harness,training,throughput] [--train_processes N]

The same command as `python -m workflows check-gpu` (options: --help); the
checks are in `workflows/gpu_check/`. Without CUDA it prints
"no CUDA: nothing checked" and exits 0.
"""

from __future__ import annotations

import sys

from workflows.cli import main

if __name__ == "__main__":
    sys.exit(main(["check-gpu", *sys.argv[1:]]))
