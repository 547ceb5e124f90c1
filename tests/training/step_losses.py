"""A callback for `python -m repo_train fit` runs under test: each optimizer step's mean loss, one JSON line each.

Named in the run's config (`--import` this file, `trainer.callbacks: [{class_path: step_losses.StepLosses}]`);
the file is `$STEP_LOSSES_FILE`, appended to, so an interrupted run and its resumption write one sequence.
"""

from __future__ import annotations

import json
import os

import pytorch_lightning as pl
import torch


class StepLosses(pl.Callback):
    """Appends {"step": N, "loss": mean over the step's micro-batches} after every optimizer step (rank 0)."""

    def __init__(self) -> None:
        self._pending: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.last_train_loss is None:
            return
        self._pending.append(pl_module.last_train_loss.float())
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        loss = float(torch.stack(self._pending).mean())
        self._pending = []
        if trainer.is_global_zero:
            with open(os.environ["STEP_LOSSES_FILE"], "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": trainer.global_step, "loss": loss}) + "\n")
