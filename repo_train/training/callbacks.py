"""Training callbacks: throughput and MFU, DeepSpeed's gradient norm, loss history.

MFU = achieved model FLOPs / peak FLOPs of the devices, with model FLOPs per
token from `repo_train.modeling.accounting` (what each layer's position policy
adds included, e.g. REPO's predictor). The peak is per device and must be
given for MFU to be logged (H100 SXM dense bf16: 989 TFLOP/s); on CPUs it is
left unset.
"""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch

from repo_train.modeling.accounting import training_flops_per_token


class ThroughputMonitor(pl.Callback):
    """Logs tokens/s (all processes), model TFLOP/s per device and MFU every optimizer step."""

    def __init__(self, peak_tflops_per_device: float | None = None, window: int = 10):
        """
        Args:
            peak_tflops_per_device: peak dense TFLOP/s of one device, for MFU (H100 SXM bf16: 989); None = no MFU.
            window: optimizer steps averaged for the rates.
        """
        self.peak = peak_tflops_per_device
        self.window = window
        self._times: list[float] = []
        self._flops_per_token: float | None = None

    def on_train_start(self, trainer, pl_module):
        self._times = [time.perf_counter()]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # not an optimizer-step boundary
        self._times.append(time.perf_counter())
        self._times = self._times[-(self.window + 1) :]
        strategy_model = trainer.model
        if hasattr(strategy_model, "get_global_grad_norm"):  # DeepSpeed engine
            norm = strategy_model.get_global_grad_norm()
            if norm is not None:
                pl_module.log("train/grad_norm", float(norm))
        if len(self._times) < 2:
            return
        seq_len = batch["input_ids"].shape[1]
        if self._flops_per_token is None:
            self._flops_per_token = training_flops_per_token(pl_module.model.config, seq_len)
        steps = len(self._times) - 1
        elapsed = self._times[-1] - self._times[0]
        datamodule = trainer.datamodule
        global_batch = datamodule.hparams.global_batch_size if datamodule is not None else batch["input_ids"].shape[0]
        tokens_per_s = steps * global_batch * seq_len / elapsed
        tflops_per_device = tokens_per_s * self._flops_per_token / trainer.world_size / 1e12
        pl_module.log("perf/tokens_per_s", tokens_per_s, prog_bar=True)
        pl_module.log("perf/tflops_per_device", tflops_per_device)
        if self.peak:
            pl_module.log("perf/mfu", tflops_per_device / self.peak)


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
