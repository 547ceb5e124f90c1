"""`python -m workflows benchmark-training`'s measuring (workflows.benchmarks.training: its options)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from repo_train.data import SyntheticData
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule
from workflows.benchmarking import alternate, summary
from workflows.benchmarks.training import TrainingBenchmark

TINY_RUN = Path(__file__).resolve().parents[2] / "tests" / "training" / "tiny_run.py"
SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
}


def train_seconds(method: str, steps: int, seq_len: int, batch: int) -> float:
    """Wall time of `steps` optimizer steps (after 2 warm-up steps) through `Trainer.fit`."""

    pl.seed_everything(0, verbose=False)
    module = RePoLightningModule(position=method, lr=1e-3, attn_implementation="sdpa", config_overrides=SHAPE)
    data = RePoDataModule(
        train=SyntheticData(seq_len=seq_len, num_samples=256, vocab_size=1024),
        global_batch_size=batch,
        micro_batch_size=batch,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps + 2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        use_distributed_sampler=False,
        gradient_clip_val=1.0,
        callbacks=[StepTimer(skip=2)],
    )
    trainer.fit(module, data)
    return trainer.callbacks[0].elapsed


class StepTimer(pl.Callback):
    """`elapsed`: the wall time of the optimizer steps after `skip` warm-up steps."""

    def __init__(self, skip: int):
        self.skip, self.start, self.elapsed = skip, None, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.skip:
            self.start = time.perf_counter()
        elif trainer.global_step > self.skip:
            self.elapsed = time.perf_counter() - self.start


def ddp_seconds(nproc: int, steps: int, workdir: Path) -> float:
    """Seconds inside `trainer.fit` (process start-up excluded) for one global batch of 8 × 512 tokens per step."""
    out = workdir / f"ddp{nproc}.json"
    prefix = (
        [sys.executable]
        if nproc == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    )
    args = [
        str(TINY_RUN),
        str(out),
        "--steps",
        str(steps),
        "--seq_len",
        "512",
        "--global_batch",
        "8",
        "--micro_batch",
        str(8 // nproc),
        "--threads",
        "1",
    ]
    if nproc > 1:
        args += ["--strategy", "ddp", "--devices", str(nproc)]
    subprocess.run([*prefix, *args], check=True, capture_output=True, cwd=workdir)
    return json.loads(out.read_text())["fit_seconds"]


def main(args: TrainingBenchmark) -> None:
    """RoPE and REPO alternated through `Trainer.fit`, then 1 vs 2 DDP processes."""
    torch.set_num_threads(args.threads)
    result = alternate(
        lambda: train_seconds("rope", args.steps, args.seq_len, args.batch),
        lambda: train_seconds("repo", args.steps, args.seq_len, args.batch),
        args.rounds,
    )
    print(
        f"shape {SHAPE}, seq_len {args.seq_len}, batch {args.batch}, {args.steps} timed steps × {args.rounds} rounds, "
        f"{args.threads} threads"
    )
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
