"""`python -m workflows check-gpu` / `scripts/check_gpu.py`: run the GPU checks, print one table, exit 0 if all pass.

The first thing to run on a new GPU node (meant to fit the issue's budget of
10 minutes on one H100; not yet timed on a GPU): every position method in bf16
against fp32 on the CPU, KV-cached decoding against recomputation, flash-attn 2
against SDPA (on a tiny random model, and the evaluation methods again on the
real pretrained model of `python -m repo_train real-model` when it is there),
Lightning + DeepSpeed ZeRO-2 (NCCL, bf16-mixed) training, resume and export,
the harness's decoding against the CPU's, and the throughput and MFU of a
1B-shaped step. Without CUDA it prints "no CUDA: nothing checked" and exits 0.
The check modules are imported only when a GPU is there.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jsonargparse.typing import PositiveFloat, PositiveInt

from repo_train.real_model import DEFAULT_OUT
from workflows.gpu_check.rows import Row, exit_code, guarded, render_table

CHECKS = ("positions", "real_model", "harness", "training", "throughput")
NO_CUDA = "no CUDA: nothing checked"


def add_arguments(parser) -> None:
    """The options of `check-gpu` (also keys of a `--config` file)."""
    parser.add_argument("--checks", type=str, default=",".join(CHECKS), help="comma-separated groups to run")
    parser.add_argument("--methods", type=str | None, default=None,
                        help="comma-separated position methods of the positions group (default: every registered "
                             "one: the model's position methods, then the evaluation methods)")  # fmt: skip
    parser.add_argument("--train_processes", "--train-processes", type=PositiveInt, default=1,
                        help="GPUs (torchrun processes) of the DeepSpeed runs")  # fmt: skip
    parser.add_argument("--real_model", "--real-model", type=str, default=DEFAULT_OUT,
                        help="real_model group: the HF directory of python -m repo_train real-model (absent: skipped)")  # fmt: skip
    parser.add_argument("--seq_len", "--seq-len", type=PositiveInt, default=1024, help="throughput: tokens per step")
    parser.add_argument("--pairs", type=PositiveInt, default=10, help="throughput: timed RoPE/REPO step pairs")
    parser.add_argument("--peak_tflops", "--peak-tflops", type=PositiveFloat | None, default=None,
                        help="peak dense bf16 TFLOP/s of one GPU for MFU (default: from the device name)")  # fmt: skip
    parser.add_argument("--workdir", type=str | None, default=None,
                        help="where runs and logs go (default: a temporary directory, kept if a check fails)")  # fmt: skip


def chosen(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    """The names of a comma-separated option, in order, each checked against `allowed` (a ValueError names the bad)."""
    names = list(dict.fromkeys(name.strip() for name in str(text).split(",") if name.strip()))
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise ValueError(f"{option} {text!r}: {'unknown ' + str(unknown) if unknown else 'empty'}; "
                         f"choose comma-separated names from {list(allowed)}")  # fmt: skip
    return names


def environment_line(device: str) -> str:
    """What ran: the device, torch and its CUDA, and flash-attn's version when installed."""
    import torch  # heavy: keeps --help fast

    try:
        flash = importlib.metadata.version("flash-attn")
    except importlib.metadata.PackageNotFoundError:
        flash = "not installed"
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else device
    return f"{name}; torch {torch.__version__} (CUDA {torch.version.cuda}); flash-attn {flash}"


def run_checks(device: str, checks: list[str], methods: list[str], workdir: Path, options) -> list[Row]:
    """The rows of each group in `checks` (positions: of `methods`), on `device`; a group that raises fails one row."""
    from workflows.gpu_check.harness_tokens import harness_rows  # heavy: keeps --help fast
    from workflows.gpu_check.positions import position_method_rows, real_model_rows  # heavy: keeps --help fast
    from workflows.gpu_check.throughput import throughput_rows  # heavy: keeps --help fast
    from workflows.gpu_check.training_run import training_rows  # heavy: keeps --help fast

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


def run(options, _parser=None) -> int:
    import torch  # heavy: keeps --help fast

    from workflows.gpu_check.method_cases import CASE_NAMES  # heavy: keeps --help fast (the method registries)

    checks = chosen(options.checks, CHECKS, "--checks")
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
    rows = run_checks(device, checks, methods, workdir, options)
    print(render_table(rows))
    print(f"took {time.perf_counter() - start:.0f} s; runs and logs in {workdir}", flush=True)
    code = exit_code(rows)
    if temporary and code == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return code
