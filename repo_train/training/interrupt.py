"""Ctrl-C (SIGINT) or SIGTERM during `fit`: finish the optimizer step, write the last checkpoint, stop.

Lightning turns Ctrl-C into exit code 1 without a checkpoint (the steps since
the last step checkpoint are lost) and SIGTERM into exit code 0, as if the run
had finished. While training runs, `InterruptCheckpoint` holds both signals
instead: a signal only sets a flag; at the next optimizer-step boundary
(`on_train_batch_end`, where step checkpoints are written too) the ranks agree
on it (a signal on any rank stops all), the run's ModelCheckpoint writes the
last checkpoint (atomically, `AtomicCheckpointIO`) marked with
`INTERRUPTED_KEY`, and `StoppedBySignal` ends the run. The command exits with
128 + the signal's number (130 for SIGINT, 143 for SIGTERM, as a shell
reports a process the signal ended) after one line naming the checkpoint and
how to resume; rerunning the same command resumes a checkpoint so marked
(`training.cli`).

A second signal stops at once, without writing (the last checkpoint stays as
it was). A signal before the first step stops there with nothing to write.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.trainer.states import TrainerFn

from repo_train.checkpoints import INTERRUPTED_KEY

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signal_name: str) -> int:
    """128 + the signal's number: what a shell reports for a process that signal ended (130, 143)."""
    return 128 + signal.Signals[signal_name].value


@dataclass(frozen=True)
class Stop:
    """How a run ended on a signal."""

    signal: str  # "SIGINT" or "SIGTERM"
    step: int  # optimizer steps done (and saved, with `checkpoint`)
    checkpoint: str | None  # None: nothing written (before the first step, or a second signal)
    seconds: float = 0.0  # time to write the checkpoint

    @property
    def exit_code(self) -> int:
        return exit_code(self.signal)


class StoppedBySignal(Exception):
    """Raised on every rank once the interrupt checkpoint is written: Lightning tears the run down (no extra
    validation, unlike `trainer.should_stop`) and the command turns it into its exit code."""

    def __init__(self, stop: Stop):
        super().__init__(f"stopped by {stop.signal} at step {stop.step}")
        self.stop = stop


class InterruptCheckpoint(pl.Callback):
    """Holds SIGINT and SIGTERM while training runs; on one, saves the last checkpoint at a step boundary."""

    def __init__(self) -> None:
        self.received: int | None = None  # the signal this process got
        self.stop: Stop | None = None  # how the run ended, once it did on a signal
        self._saving: dict[str, Any] | None = None  # the marker, while the interrupt checkpoint is written
        self._previous: dict[int, Any] = {}
        self._checked_step = -1
        self._say = True  # rank 0 announces the signal

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt  # the second signal: stop at once, without writing
        self.received = signum
        if self._say:  # os.write: print() here could re-enter a write to stderr the signal interrupted
            name = signal.Signals(signum).name
            note = (
                f"\n{name}: stopping after this optimizer step and writing the last checkpoint "
                "(again: stop at once, without it)\n"
            )
            try:
                os.write(2, note.encode())
            except OSError:
                pass  # no stderr: the final line says it all

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set there (Lightning's own stay)
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if current != self._on_signal:
                self._previous[signum] = current
                signal.signal(signum, self._on_signal)

    def _restore(self) -> None:
        """The handlers from before `on_train_start`, where ours are still set (Lightning restores SIGTERM's itself)."""
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    def _agreed_signal(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> int:
        """The highest signal number any rank received (0: none), the same on every rank."""
        mine = torch.tensor(self.received or 0, dtype=torch.int64, device=pl_module.device)
        return int(trainer.strategy.reduce(mine, reduce_op="max"))

    # ------------------------------------------------------------------ hooks
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._say = trainer.is_global_zero
        if trainer.received_sigterm and self.received is None:  # Lightning's handler, before ours was set
            self.received = signal.SIGTERM
        self._install()  # after Lightning registered its SIGTERM handler: ours replaces it while training runs
        self._checked_step = trainer.global_step
        signum = self._agreed_signal(trainer, pl_module)
        if signum:  # nothing trained yet: nothing to write
            self.stop = Stop(signal.Signals(signum).name, trainer.global_step, None)
            raise StoppedBySignal(self.stop)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx):
        if trainer.global_step == self._checked_step:
            return  # inside a gradient accumulation: no optimizer step yet
        self._checked_step = trainer.global_step
        signum = self._agreed_signal(trainer, pl_module)
        if not signum or 0 < trainer.max_steps <= trainer.global_step:
            return  # no signal, or the run's last step: it ends as finished
        name = signal.Signals(signum).name
        self._saving = {"signal": name, "step": trainer.global_step}
        start = time.perf_counter()
        try:
            path = self._save(trainer)
        finally:
            self._saving = None
        self.stop = Stop(name, trainer.global_step, path, time.perf_counter() - start)
        raise StoppedBySignal(self.stop)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if self._saving is not None:
            checkpoint[INTERRUPTED_KEY] = dict(self._saving)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and isinstance(exception, KeyboardInterrupt) and self.stop is None:  # a 2nd signal, or before ours
            self.stop = Stop(signal.Signals(self.received or signal.SIGINT).name, trainer.global_step, None)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()

    # ------------------------------------------------------------------ saving
    @staticmethod
    def _save(trainer: pl.Trainer) -> str:
        """Write the checkpoint through the run's ModelCheckpoint (it owns last.ckpt and step=N.ckpt); every
        rank calls this (DeepSpeed writes a shard from each). The path written."""
        callback = trainer.checkpoint_callback
        if not isinstance(callback, pl.callbacks.ModelCheckpoint):  # checkpointing off: still keep the work
            path = str(Path(trainer.default_root_dir) / "last.ckpt")
            trainer.save_checkpoint(path)
            return path
        candidates = callback._monitor_candidates(trainer)
        if callback.save_last is True:  # one write: last.ckpt (ModelCheckpoint then skips this step)
            callback._save_last_checkpoint(trainer, candidates)
            return callback.last_model_path
        path = callback.format_checkpoint_name(candidates)  # step=N.ckpt, and a link to it for save_last="link"
        callback._save_checkpoint(trainer, path)
        callback._save_last_checkpoint(trainer, candidates)
        return path
