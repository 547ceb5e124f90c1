"""A callback that records the mean training loss of every optimizer step, for tests that compare runs."""

from __future__ import annotations

import pytorch_lightning as pl
import torch


class LossHistory(pl.Callback):
    """Mean training loss of every optimizer step, over its micro-batches and all processes.

    The number a run with one process and the full batch would report, so runs
    on different process counts (or interrupted and resumed) can be compared.
    """

    def __init__(self):
        self.losses: list[float] = []
        self._pending: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if outputs is None or pl_module.last_train_loss is None:
            return  # a skipped (non-finite) step
        # Lightning's `outputs` are divided by the accumulation count; the module keeps the plain loss.
        self._pending.append(pl_module.last_train_loss.float())
        if (batch_idx + 1) % trainer.accumulate_grad_batches == 0:
            mean = torch.stack(self._pending).mean()
            self.losses.append(float(trainer.strategy.reduce(mean, reduce_op="mean")))
            self._pending = []
