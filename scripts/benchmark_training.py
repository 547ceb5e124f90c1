#!/usr/bin/env python
"""Training throughput of RoPE vs REPO through the real Lightning path, side by side, and DDP scaling.

Runs the same tiny-but-not-trivial model with each position method on the same
synthetic data for the same steps, alternating methods over several rounds,
and prints median tokens/s and the REPO/RoPE ratio (target <= 1.05 in time,
i.e. >= 0.95 in throughput). Then times 1 vs 2 DDP processes (torchrun) on the
same global batch and prints the scaling.

    python scripts/benchmark_training.py [--rounds 3] [--steps 8] [--seq-len 1024]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, parse_script
from workflows.benchmarking import alternate, summary

TINY_RUN = Path(__file__).resolve().parents[1] / "tests" / "training" / "tiny_run.py"
SHAPE = {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 4,
         "num_key_value_heads": 4, "vocab_size": 1024}  # fmt: skip


def train_seconds(method: str, steps: int, seq_len: int, batch: int) -> float:
    """Wall time of `steps` optimizer steps (after 2 warm-up steps) through `Trainer.fit`."""
    import pytorch_lightning as pl  # lazy: --help answers without torch and Lightning

    from repo_train.data import SyntheticData  # lazy: --help answers without torch
    from repo_train.training.datamodule import RePoDataModule
    from repo_train.training.module import RePoLightningModule

    pl.seed_everything(0, verbose=False)
    module = RePoLightningModule(position=method, lr=1e-3, attn_implementation="sdpa", config_overrides=SHAPE)
    data = RePoDataModule(
        train=SyntheticData(seq_len=seq_len, num_samples=256, vocab_size=1024),
        global_batch_size=batch,
        micro_batch_size=batch,
    )
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=steps + 2, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, use_distributed_sampler=False, gradient_clip_val=1.0,
        callbacks=[step_timer(skip=2)],
    )  # fmt: skip
    trainer.fit(module, data)
    return trainer.callbacks[0].elapsed


def step_timer(skip: int):
    """A callback whose `elapsed` is the wall time of the optimizer steps after `skip` warm-up steps (made here, not
    at module level: the class derives from Lightning's, which `--help` does not import)."""
    import pytorch_lightning as pl  # lazy: --help answers without Lightning

    class _Timer(pl.Callback):
        def __init__(self, skip: int):
            self.skip, self.start, self.elapsed = skip, None, 0.0

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == self.skip:
                self.start = time.perf_counter()
            elif trainer.global_step > self.skip:
                self.elapsed = time.perf_counter() - self.start

    return _Timer(skip)


def ddp_seconds(nproc: int, steps: int, workdir: Path) -> float:
    """Seconds inside `trainer.fit` (process start-up excluded) for one global batch of 8 × 512 tokens per step."""
    out = workdir / f"ddp{nproc}.json"
    prefix = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                  f"--nproc_per_node={nproc}"]  # fmt: skip
    args = [str(TINY_RUN), str(out), "--steps", str(steps), "--seq-len", "512", "--global-batch", "8",
            "--micro-batch", str(8 // nproc), "--threads", "1"]  # fmt: skip
    if nproc > 1:
        args += ["--strategy", "ddp", "--devices", str(nproc)]
    subprocess.run([*prefix, *args], check=True, capture_output=True, cwd=workdir)
    return json.loads(out.read_text())["fit_seconds"]


PROG = "scripts/benchmark_training.py"


def build_parser() -> ConfigParser:
    """The benchmark's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--rounds", type=PositiveInt, default=3, help="timed RoPE/REPO pairs")
    parser.add_argument("--steps", type=PositiveInt, default=8, help="timed optimizer steps per run (after 2 warm-up)")
    parser.add_argument("--seq_len", "--seq-len", type=PositiveInt, default=1024, help="tokens per sequence")
    parser.add_argument("--batch", type=PositiveInt, default=2, help="sequences per step")
    parser.add_argument("--skip_ddp", "--skip-ddp", action="store_true", help="skip the 1 vs 2 DDP processes timing")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch  # lazy: --help answers without torch

    torch.set_num_threads(2)
    result = alternate(
        lambda: train_seconds("rope", args.steps, args.seq_len, args.batch),
        lambda: train_seconds("repo", args.steps, args.seq_len, args.batch),
        args.rounds,
    )
    print(f"shape {SHAPE}, seq_len {args.seq_len}, batch {args.batch}, {args.steps} timed steps × {args.rounds} rounds")
    tokens = args.steps * args.batch * args.seq_len
    for method, seconds in (("rope", result.a), ("repo", result.b)):
        rates = [tokens / s for s in seconds]
        print(f"  {method:5s} tokens/s: median {statistics.median(rates):8.0f}  (all: {[round(v) for v in rates]})")
    print(textwrap.indent(summary(result, "RoPE", "REPO"), "  "))
    if args.skip_ddp:
        return
    with tempfile.TemporaryDirectory() as tmp:
        one = ddp_seconds(1, 20, Path(tmp))
        two = ddp_seconds(2, 20, Path(tmp))
    print(
        f"  DDP on this machine, 20 steps of 8 × 256 tokens (process start-up included): 1 process {one:.1f}s, "
        f"2 processes {two:.1f}s, speed-up {one / two:.2f}x"
    )
    print(json.dumps({"repo_over_rope_time": result.median_ratio, "ddp_speedup": one / two}))


if __name__ == "__main__":
    main()
