"""A tiny training run, used by the tests in one process or under torchrun.

    python tiny_run.py OUT.json --strategy ddp --devices 2 --steps 6 [--ckpt_every N] [--resume CKPT]

Writes {"losses": [...per optimizer step...], "checkpoints": [...]} (rank 0). `--strategy fsdp2` is
Lightning's ModelParallelStrategy (FSDP2 over all processes); `--logits_out FILE` saves the trained
module's logits on fixed ids (every rank runs the forward, FSDP2 gathers the weights; rank 0 writes).
"""

import argparse
import json
import os
import sys
import time

import pytorch_lightning as pl
import torch
from loss_history import LossHistory
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies import ModelParallelStrategy

from repo_train.data import SyntheticData
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule
from repo_train.training.strategies import DEFAULT_ZERO2_CONFIG, CPUDeepSpeedStrategy


def strategy_for(name: str, devices: int, single_file: bool = False):
    """`deepspeed_cpu` with the packaged ZeRO-2 settings; `fsdp2` FSDP2 over all `devices` (a checkpoint
    directory, or one file with `single_file`); `ddp` and `auto` are Lightning's own names."""
    if name == "deepspeed_cpu":
        return CPUDeepSpeedStrategy(config=json.loads(DEFAULT_ZERO2_CONFIG.read_text()))
    if name == "fsdp2":
        return ModelParallelStrategy(
            data_parallel_size=devices, tensor_parallel_size=1, save_distributed_checkpoint=not single_file
        )
    return name


#: Fixed input ids for `--logits_out` (the tiny model's vocabulary is 256).
LOGITS_IDS = torch.arange(2 * 24).reshape(2, 24) * 5 % 240 + 16


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--method", default="repo")
    parser.add_argument("--global_batch", type=int, default=8)
    parser.add_argument("--micro_batch", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--ckpt_every", type=int, default=0)
    parser.add_argument("--ckpt_dir", default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--single_file", action="store_true", help="fsdp2: one checkpoint file, not a directory")
    parser.add_argument("--logits_out", default=None)
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--activation_checkpointing", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pl.seed_everything(0, verbose=False)
    module = RePoLightningModule(
        position=args.method,
        lr=args.lr,
        attn_implementation="sdpa",
        activation_checkpointing=args.activation_checkpointing,
    )
    data = RePoDataModule(
        train=SyntheticData(seq_len=args.seq_len, num_samples=512, seed=1),
        global_batch_size=args.global_batch,
        micro_batch_size=args.micro_batch,
    )
    history = LossHistory()
    callbacks = [history]
    if args.ckpt_every:
        callbacks.append(
            ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.ckpt_every, save_top_k=-1, save_last=True)
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy_for(args.strategy, args.devices, args.single_file),
        max_steps=args.steps,
        gradient_clip_val=1.0,
        precision=args.precision,
        logger=False,
        enable_checkpointing=bool(args.ckpt_every),
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        callbacks=callbacks,
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    trainer.fit(module, data, ckpt_path=args.resume)
    seconds = time.perf_counter() - start
    if args.logits_out:
        module.eval()
        with torch.no_grad():
            logits = module(LOGITS_IDS)
        if trainer.global_rank == 0:
            torch.save(logits, args.logits_out)
    if trainer.global_rank == 0:
        with open(args.out, "w") as handle:
            json.dump({"losses": history.losses, "global_step": trainer.global_step, "fit_seconds": seconds}, handle)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
