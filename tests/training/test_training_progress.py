"""Training progress: plain lines in a log, a bar counting optimizer steps, Lightning's known warnings silenced."""

import io
import logging
import re
import warnings
from types import SimpleNamespace

import pytorch_lightning as pl
import torch

from repo_common.progress import Progress
from repo_train.data import SyntheticData
from repo_train.training import cli  # noqa: F401  (the CLI module drops Lightning's litlogger tip)
from repo_train.training.callbacks import ProgressLog, StepProgressBar, ThroughputMonitor
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule

SILENCED = ("LeafSpec", "across ranks is zero")


def test_a_fit_with_accumulation_prints_step_lines_and_the_bar_counts_steps(tmp_path, one_thread):
    log = io.StringIO()  # not a terminal: lines even though a bar is on
    progress = ProgressLog(every_n_steps=2, every_seconds=0)
    progress.stream = log
    data = RePoDataModule(
        train=SyntheticData(seq_len=16, num_samples=64), global_batch_size=4, micro_batch_size=2
    )  # no validation data: val_dataloader returns [], which made Lightning warn
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    lightning_log = logging.getLogger("pytorch_lightning.utilities.rank_zero")  # where Lightning's info lines go
    lightning_log.addHandler(handler)
    try:
        trainer = pl.Trainer(
            accelerator="cpu", max_steps=4, logger=False, enable_checkpointing=False, enable_model_summary=False,
            use_distributed_sampler=False, default_root_dir=tmp_path,
            callbacks=[ThroughputMonitor(), progress, StepProgressBar()],
        )  # fmt: skip
    finally:
        lightning_log.removeHandler(handler)
    said = [record.getMessage() for record in records]
    assert any("GPU available" in line for line in said) and not any("litlogger" in line for line in said), said
    module = RePoLightningModule(lr=3e-3, attn_implementation="sdpa")
    with warnings.catch_warnings(record=True) as caught:
        # pytest ignores every DeprecationWarning/FutureWarning; drop those blanket filters so only the
        # project's narrow ones (repo_train/training/datamodule.py) can hide a warning here.
        warnings.filters[:] = [f for f in warnings.filters if not (f[0] == "ignore" and f[1] is None)]
        warnings.simplefilter("always", append=True)
        trainer.fit(module, data)
    assert trainer.accumulate_grad_batches == 2 and trainer.global_step == 4
    start, *lines = log.getvalue().splitlines()
    assert start == "train step: starting at step 0 of 4 (a line after the first step)"  # at once, not after minutes
    # the first step at once (its time gives the ETA), then every 2 steps, and the last
    assert [line.split("  ")[0] for line in lines] == ["train step: 1/4 (25%)", "train step: 3/4 (75%)",
                                                      "train step: 4/4 (100%)"]  # fmt: skip
    assert "eta " in lines[0] and all(" loss " in line and " lr " in line for line in lines)
    assert "tokens/s " in lines[-1]  # the throughput monitor has a rate from the second step on
    loss = float(re.search(r" loss (\S+)", lines[-1]).group(1))
    last = float(trainer.callback_metrics["train/loss"])
    assert abs(loss - last) <= 5e-4 * abs(last)  # the last step's loss, to the 4 digits shown
    bar = trainer.progress_bar_callback.train_progress_bar
    assert (bar.n, bar.total, bar.desc.rstrip(": ")) == (4, 4, "train")  # Lightning's own bar: 8/4 here
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if any(phrase in m for phrase in SILENCED)], messages


def test_validation_loss_gets_its_own_line_and_sanity_checks_none():
    log = io.StringIO()
    callback = ProgressLog()
    callback.progress = Progress(10, "train step", mode="lines", stream=log)
    trainer = SimpleNamespace(callback_metrics={"val/loss": torch.tensor(3.14159)}, sanity_checking=True, global_step=0)
    callback.on_validation_end(trainer, None)
    trainer.sanity_checking, trainer.global_step = False, 6
    callback.on_validation_end(trainer, None)
    assert log.getvalue().splitlines() == ["validation at step 6: loss 3.142"]


def test_a_run_resumed_mid_epoch_counts_steps_of_max_steps_from_its_first_batch(tmp_path, one_thread):
    """Lightning skips on_train_epoch_start for the epoch a run resumes in: the bar read "3/?" until the next."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    seen = []

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            bar = trainer.progress_bar_callback.train_progress_bar
            seen.append((bar.n, bar.total, bar.desc.rstrip(": ")))

    def fit(max_steps: int, ckpt_path=None) -> None:
        data = RePoDataModule(train=SyntheticData(seq_len=16, num_samples=64), global_batch_size=4, micro_batch_size=4)
        trainer = pl.Trainer(
            accelerator="cpu", max_steps=max_steps, logger=False, enable_model_summary=False,
            use_distributed_sampler=False, default_root_dir=tmp_path, callbacks=[StepProgressBar(), Watch(),
            ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_train_steps=2)],
        )  # fmt: skip
        trainer.fit(RePoLightningModule(lr=3e-3, attn_implementation="sdpa"), data, ckpt_path=ckpt_path)

    fit(2)  # 2 of the epoch's 16 batches, saved by every_n_train_steps as the loop configs do
    seen.clear()
    fit(4, ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert seen == [(3, 4, "train"), (4, 4, "train")]
