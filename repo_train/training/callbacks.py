"""Training callbacks: throughput and MFU, DeepSpeed's gradient norm, progress.

MFU = achieved model FLOPs / peak FLOPs of the devices, with model FLOPs per
token from `repo_train.modeling.accounting` (what each layer's position policy
adds included, e.g. REPO's predictor). The peak is per device and must be
given for MFU to be logged (H100 SXM dense bf16: 989 TFLOP/s); on CPUs it is
left unset.

Progress counts optimizer steps towards `max_steps`: `StepProgressBar` on a
terminal, `ProgressLog`'s plain lines in a log file (repo_common/progress.py).
"""

from __future__ import annotations

import sys
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import TQDMProgressBar

from repo_common.progress import DEFAULT_SECONDS, Progress, is_terminal
from repo_train.modeling.accounting import training_flops_per_token


class ThroughputMonitor(pl.Callback):
    """Logs tokens/s (all processes), model TFLOP/s per device, MFU and (CUDA) peak memory every optimizer step."""

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
        if pl_module.device.type == "cuda":  # what a micro batch size costs: the first thing to check before a run
            pl_module.log("perf/peak_memory_gib", torch.cuda.max_memory_allocated(pl_module.device) / 2**30)


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, counting optimizer steps towards `max_steps`.

    Lightning's own bars count micro-batches against min(batches, max_steps −
    step), so gradient accumulation 2 shows 600/300, and the Rich bar titles a
    `max_epochs=-1` run "Epoch 0/-2". Runs here stop at `max_steps` (the
    learning rate decays to 0 there), so steps are the unit that means something.
    """

    def on_train_start(self, trainer, *args) -> None:
        super().on_train_start(trainer, *args)
        # A run resumed mid-epoch skips on_train_epoch_start for that epoch: without this its bar read "40/?".
        self._count_steps(trainer)

    def on_train_epoch_start(self, trainer, *args) -> None:
        if trainer.max_steps > 0 and self.train_progress_bar is not None:
            return  # one bar over the whole run (Lightning's reset here would flash "0/8" at each new epoch)
        super().on_train_epoch_start(trainer, *args)

    def _count_steps(self, trainer) -> None:
        if trainer.max_steps > 0 and self.train_progress_bar is not None:
            bar = self.train_progress_bar
            bar.total, bar.unit = trainer.max_steps, "step"
            bar.initial = bar.n = trainer.global_step  # a resumed run: the rate and ETA count this run's steps
            bar.set_description("train")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.max_steps <= 0:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar, step = self.train_progress_bar, trainer.global_step
        if bar is not None and not bar.disable and self._should_update(step, bar.total):
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes the bar too

    def get_metrics(self, trainer, pl_module):
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the logger's version number, not a metric
        return metrics


class ProgressLog(pl.Callback):
    """Plain progress lines for a log file: step/max_steps, loss, tokens/s, lr, elapsed and ETA.

    Printed (rank 0, stderr) unless a progress bar draws on a terminal: when
    the output goes to a file, or the bar is off. One line when training
    starts, one after this run's first optimizer step (its time and the ETA,
    before minutes pass in silence), then one every `every_n_steps` optimizer
    steps or `every_seconds` seconds, whichever comes later, and the
    validation loss after each validation.
    """

    METRICS = (("train/loss", "loss"), ("perf/tokens_per_s", "tokens/s"), ("train/lr", "lr"))

    def __init__(self, every_n_steps: int = 10, every_seconds: float = DEFAULT_SECONDS):
        """
        Args:
            every_n_steps: a line after at least this many optimizer steps ...
            every_seconds: ... and at least this many seconds since the last line.
        """
        if every_n_steps < 1 or every_seconds < 0:
            raise ValueError(
                f"progress_log: every_n_steps must be >= 1 and every_seconds >= 0, got {every_n_steps}, {every_seconds}"
            )
        self.every_n_steps, self.every_seconds = every_n_steps, every_seconds
        self.stream = None  # sys.stderr when training starts (tests set their own)
        self.progress: Progress | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        bar_on_terminal = trainer.progress_bar_callback is not None and is_terminal(stream)
        if not trainer.is_global_zero or bar_on_terminal:
            self.progress = None
            return
        total = trainer.max_steps if trainer.max_steps > 0 else None
        self.progress = Progress(
            total, "train step", initial=trainer.global_step, mode="lines", every=self.every_n_steps,
            seconds=self.every_seconds, stream=stream,
        )  # fmt: skip
        of = f" of {total}" if total else ""
        self.progress.write(f"train step: starting at step {trainer.global_step}{of} (a line after the first step)")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.progress is None or trainer.global_step == self.progress.count:
            return  # not printing, or inside an accumulation
        metrics = trainer.callback_metrics
        fields = {name: float(metrics[key]) for key, name in self.METRICS if key in metrics}
        first = self.progress.count == self.progress.initial
        self.progress.set(trainer.global_step, **fields)
        if first and not self.progress.lines_written:
            self.progress.line_now()

    def on_validation_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if self.progress is not None and not trainer.sanity_checking and loss is not None:
            self.progress.write(f"validation at step {trainer.global_step}: loss {float(loss):.4g}")
