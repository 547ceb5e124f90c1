"""`python -m workflows check-gpu` / `scripts/check_gpu.py`: run the GPU checks, print one table, exit 0 if all pass.

The first thing to run on a new GPU node (meant to fit the issue's budget of
10 minutes on one H100; not yet timed on a GPU): every position method in bf16
against fp32 on the CPU, KV-cached decoding against recomputation, flash-attn 2
against SDPA (on a tiny random model, and the evaluation methods again on the
real pretrained model of `python -m repo_train real-model` when it is there),
Lightning + DeepSpeed ZeRO-2 (NCCL, bf16-mixed) training, resume and export,
the harness's decoding against the CPU's, and the throughput and MFU of a
1B-shaped step. Without CUDA it prints "no CUDA: nothing checked" and exits 0.
The check groups (`workflows.gpu_check.groups`) are imported only when a GPU is there; the options
are `workflows.gpu_check.options`.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import tempfile
import time
from pathlib import Path

import torch

from repo_common.config_cli import deferred
from workflows.gpu_check.method_cases import CASE_NAMES
from workflows.gpu_check.rows import chosen, exit_code, render_table

NO_CUDA = "no CUDA: nothing checked"
_run_checks = deferred("workflows.gpu_check.groups", "run_checks")


def environment_line(device: str) -> str:
    """What ran: the device, torch and its CUDA, and flash-attn's version when installed."""
    try:
        flash = importlib.metadata.version("flash-attn")
    except importlib.metadata.PackageNotFoundError:
        flash = "not installed"
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else device
    return f"{name}; torch {torch.__version__} (CUDA {torch.version.cuda}); flash-attn {flash}"


def run(options, checks: list[str]) -> int:
    """The checks of `checks` (already checked by `workflows.gpu_check.options`) on the GPU, as one table."""
    methods = chosen(options.methods or ",".join(CASE_NAMES), CASE_NAMES, "--methods")
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    device = "cuda"
    print(f"check-gpu on {environment_line(device)}", flush=True)
    temporary = options.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="check-gpu-") if temporary else options.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = _run_checks(device, checks, methods, workdir, options)
    print(render_table(rows))
    print(f"took {time.perf_counter() - start:.0f} s; runs and logs in {workdir}", flush=True)
    code = exit_code(rows)
    if temporary and code == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return code
