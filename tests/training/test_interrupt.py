"""Ctrl-C (SIGINT) or SIGTERM during `fit`: the last checkpoint at a step boundary, exit 130 / 143, and the same
command resumes exactly (training/interrupt.py, training/cli.py).

Before: Ctrl-C exited 1 with the steps since the last step checkpoint lost, SIGTERM exited 0 as if the run had
finished, and the rerun was refused (a root with an earlier run's checkpoint).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from interrupt import fit_with_signal

from repo_train.checkpoints import INTERRUPTED_KEY, read_interruption, training_progress
from repo_train.training.cli import interrupted_run_checkpoint, resume_command, stop_line
from repo_train.training.interrupt import InterruptCheckpoint, Stop, StoppedBySignal, exit_code

ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- the flag (fast)


def test_a_signal_only_sets_the_flag_and_a_second_one_stops_at_once(capfd):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    callback = InterruptCheckpoint()
    callback._install()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler before the next line
        assert callback.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        callback._restore()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    note = capfd.readouterr().err.strip()
    assert (
        note
        == "SIGINT: stopping after this optimizer step and writing the last checkpoint (again: stop at once, without it)"
    )


def test_restoring_leaves_a_handler_set_after_ours_alone():
    callback = InterruptCheckpoint()
    before = signal.getsignal(signal.SIGTERM)
    callback._install()
    later = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # e.g. Lightning's teardown restored its original
    assert later == callback._on_signal
    try:
        callback._restore()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Strategy:
    """Lightning's `strategy.reduce(max)` over this rank and the others' values."""

    def __init__(self, others=()):
        self.others = list(others)

    def reduce(self, tensor, reduce_op):
        assert reduce_op == "max"
        return torch.tensor(max([int(tensor), *self.others]))


def _trainer(tmp_path, others=(), max_steps=10):
    trainer = SimpleNamespace(
        global_step=0, max_steps=max_steps, checkpoint_callback=None, default_root_dir=str(tmp_path),
        strategy=_Strategy(others), is_global_zero=True, received_sigterm=False,
    )  # fmt: skip
    module = SimpleNamespace(device=torch.device("cpu"))

    def save_checkpoint(path):
        checkpoint = {"state_dict": {}, "global_step": trainer.global_step}
        callback.on_save_checkpoint(trainer, module, checkpoint)
        torch.save(checkpoint, path)

    trainer.save_checkpoint = save_checkpoint
    callback = InterruptCheckpoint()
    return callback, trainer, module


def test_the_checkpoint_is_written_at_the_next_optimizer_step_and_marked(tmp_path):
    callback, trainer, module = _trainer(tmp_path)
    callback.on_train_start(trainer, module)  # no signal yet: trains
    callback.received = signal.SIGINT  # what the handler does
    callback.on_train_batch_end(trainer, module, None, None, 0)  # inside an accumulation: not a safe point
    assert not (tmp_path / "last.ckpt").exists()
    trainer.global_step = 1  # the optimizer stepped
    with pytest.raises(StoppedBySignal) as stopped:
        callback.on_train_batch_end(trainer, module, None, None, 1)
    stop = stopped.value.stop
    assert (stop.signal, stop.step, stop.checkpoint, stop.exit_code) == ("SIGINT", 1, str(tmp_path / "last.ckpt"), 130)
    assert read_interruption(tmp_path / "last.ckpt") == {"signal": "SIGINT", "step": 1}
    assert interrupted_run_checkpoint(str(tmp_path)) == (tmp_path / "last.ckpt", {"signal": "SIGINT", "step": 1})
    torch.save({"state_dict": {}, "global_step": 10}, tmp_path / "last.ckpt")  # the run went on and finished
    assert read_interruption(tmp_path / "last.ckpt") is None and interrupted_run_checkpoint(str(tmp_path)) is None
    (tmp_path / "last.ckpt").write_bytes(b"damaged")  # not resumed by itself: `fit` refuses, naming --ckpt_path
    assert interrupted_run_checkpoint(str(tmp_path)) is None


def test_the_ranks_agree_on_the_signal(tmp_path):
    callback, trainer, module = _trainer(tmp_path, others=[0])
    callback.on_train_start(trainer, module)
    trainer.global_step = 3
    callback.on_train_batch_end(trainer, module, None, None, 5)  # no rank got a signal: trains on
    trainer.strategy.others = [signal.SIGTERM]  # another rank got SIGTERM, this one nothing
    trainer.global_step = 4
    with pytest.raises(StoppedBySignal) as stopped:
        callback.on_train_batch_end(trainer, module, None, None, 7)
    assert (stopped.value.stop.signal, stopped.value.stop.exit_code) == ("SIGTERM", 143)
    assert read_interruption(tmp_path / "last.ckpt") == {"signal": "SIGTERM", "step": 4}


def test_a_signal_before_the_first_step_stops_there_and_one_at_the_last_step_lets_the_run_finish(tmp_path):
    callback, trainer, module = _trainer(tmp_path, others=[signal.SIGINT])
    with pytest.raises(StoppedBySignal) as stopped:
        callback.on_train_start(trainer, module)
    assert stopped.value.stop == Stop("SIGINT", 0, None) and not (tmp_path / "last.ckpt").exists()
    callback, trainer, module = _trainer(tmp_path, max_steps=4)
    callback.on_train_start(trainer, module)
    callback.received, trainer.global_step = signal.SIGINT, 4
    callback.on_train_batch_end(trainer, module, None, None, 7)  # finished: nothing left to resume
    assert callback.stop is None and not (tmp_path / "last.ckpt").exists()


def test_the_last_line_says_where_the_work_is_and_how_to_resume():
    argv = ["fit", "--config", "run.yaml", "--ckpt_path", "old/step=5.ckpt", "--model.lr", "0.01"]
    assert exit_code("SIGINT") == 130 and exit_code("SIGTERM") == 143
    assert resume_command(argv, "new/last.ckpt") == (
        "python -m repo_train fit --config run.yaml --ckpt_path new/last.ckpt --model.lr 0.01"
    )
    assert resume_command(["fit", "--ckpt_path=a b.ckpt"], "c.ckpt") == "python -m repo_train fit --ckpt_path=c.ckpt"
    assert resume_command(["fit", "--config", "my run.yaml"], "x") == "python -m repo_train fit --config 'my run.yaml'"
    written = stop_line(Stop("SIGTERM", 131, "r/last.ckpt", 0.25), ["fit"], "r/last.ckpt", 300)
    assert written == (
        "stopped by SIGTERM at step 131 of 300; checkpoint written in 0.25 s: r/last.ckpt; to resume, run the same "
        "command again: python -m repo_train fit"
    )
    assert stop_line(Stop("SIGINT", 131, None), ["fit"], "r/step=100.ckpt", 300) == (
        "stopped by SIGINT at step 131 of 300 without writing a checkpoint; the last one is r/step=100.ckpt: "
        "resume it with --ckpt_path r/step=100.ckpt"
    )
    assert stop_line(Stop("SIGINT", 0, None), ["fit"], "", 300).endswith(
        "before training started: nothing trained, nothing written"
    )


# ----------------------------------------------------------------------------- the command in this process

TINY = [
    "fit", "--trainer.accelerator", "cpu", "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
    "--data.train", "SyntheticData", "--data.train.seq_len", "16", "--data.train.num_samples", "64",
    "--data.global_batch_size", "4", "--data.micro_batch_size", "2", "--trainer.max_steps", "6",
    "--checkpoint.every_n_train_steps", "2",
]  # fmt: skip


def test_ctrl_c_while_the_data_is_read_ends_in_one_line_and_130(tmp_path, monkeypatch, capsys, one_thread):
    from repo_train.training.cli import run
    from repo_train.training.datamodule import RePoDataModule

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(RePoDataModule, "build_sources", interrupted)
    assert run([*TINY, "--trainer.default_root_dir", str(tmp_path / "run")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "python -m repo_train fit: stopped by SIGINT before training started"
    )


class _TwoSignals(pl.Callback):
    """Ctrl-C twice during step 3 (before its end): the second stops at once, without a checkpoint."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.slow  # a short Lightning run in this process (~10 s)
def test_a_second_signal_stops_at_once_and_names_the_last_checkpoint(tmp_path, monkeypatch, capsys, one_thread):
    from repo_train.training import cli

    plain = cli._cli_arguments

    def with_two_signals(argv, terminal):
        arguments = plain(argv, terminal)
        return {**arguments, "trainer_defaults": {**arguments["trainer_defaults"], "callbacks": [_TwoSignals()]}}

    monkeypatch.setattr(sys, "argv", ["python -m repo_train"])
    monkeypatch.setattr(cli, "_cli_arguments", with_two_signals)
    try:
        with pytest.raises(SystemExit) as stopped:
            cli.run([*TINY, "--trainer.default_root_dir", str(tmp_path / "run")])
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores SIGINT after a KeyboardInterrupt
    assert stopped.value.code == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    checkpoint = next((tmp_path / "run").rglob("last.ckpt"))
    assert last == (
        f"python -m repo_train fit: stopped by SIGINT at step 3 of 6 without writing a checkpoint; the last one is "
        f"{checkpoint}: resume it with --ckpt_path {checkpoint}"
    )
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert state["global_step"] == 2 and INTERRUPTED_KEY not in state  # the step-2 checkpoint, as it was


# ----------------------------------------------------------------------------- the command (slow)

STEPS, EVERY, SIGNAL_AFTER = 24, 5, 7  # the signal lands past the step-5 checkpoint, before the step-10 one


def _command(root: Path, extra: Path) -> list[str]:
    return [
        sys.executable, "-m", "repo_train", "fit", "--config", str(ROOT / "configs/train/tiny-repo.yaml"),
        "--config", str(extra), "--trainer.max_steps", str(STEPS), "--checkpoint.every_n_train_steps", str(EVERY),
        "--trainer.default_root_dir", str(root), "--progress_log.every_n_steps", "1",
        "--progress_log.every_seconds", "0",
    ]  # fmt: skip


def _extra_config(tmp_path: Path) -> Path:
    """The test's own callback, which appends each step's loss to $STEP_LOSSES_FILE."""
    path = tmp_path / "losses.yaml"
    recorder = Path(__file__).with_name("step_losses.py")
    path.write_text(f"import: [{recorder}]\ntrainer:\n  callbacks:\n    - class_path: step_losses.StepLosses\n")
    return path


def _run(command: list[str], losses: Path, send: signal.Signals | None = None) -> tuple[int, str]:
    """(exit code, stderr) of `command`; with `send`, that signal once a progress line shows step SIGNAL_AFTER."""
    env = {**os.environ, "STEP_LOSSES_FILE": str(losses), "PYTHONPATH": str(ROOT)}
    return fit_with_signal(command, ROOT, env, send, SIGNAL_AFTER)


def _losses(path: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, path.read_text().splitlines())]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[tuple[int, float]]:
    """Each step's loss of one uninterrupted run."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    code, err = _run(_command(tmp / "run", _extra_config(tmp)), tmp / "losses.jsonl")
    assert code == 0, err[-3000:]
    losses = _losses(tmp / "losses.jsonl")
    assert [step for step, _ in losses] == list(range(1, STEPS + 1))
    return losses


@pytest.mark.slow  # four CLI runs in subprocesses (the uninterrupted one shared), ~20 s each on a busy 2-core machine
@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_writes_the_last_checkpoint_and_the_same_command_resumes_exactly(tmp_path, uninterrupted, sent):
    losses, root = tmp_path / "losses.jsonl", tmp_path / "run"
    command = _command(root, _extra_config(tmp_path))
    code, err = _run(command, losses, send=sent)
    assert code == 128 + sent.value, err[-3000:]
    last = err.strip().splitlines()[-1]
    found = re.fullmatch(
        rf"python -m repo_train fit: stopped by {sent.name} at step (\d+) of {STEPS}; checkpoint written in "
        r"[\d.]+ s: (\S+); to resume, run the same command again: python -m repo_train fit .*",
        last,
    )
    assert found, last
    step, checkpoint = int(found.group(1)), Path(found.group(2))
    assert EVERY < step < STEPS  # past the step-5 checkpoint: those steps are kept, not lost
    assert checkpoint.name == "last.ckpt" and not list(checkpoint.parent.glob("*.tmp"))
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert state["global_step"] == step and state[INTERRUPTED_KEY] == {"signal": sent.name, "step": step}
    progress = training_progress(state)  # what an export of it records in export.json
    assert (progress["step"], progress["total_steps"], progress["status"]) == (step, STEPS, "interrupted")
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["consumed"] == step * 16  # the data position
    assert [s for s, _ in _losses(losses)] == list(range(1, step + 1))

    code, err = _run(command, losses)  # the same command, no --ckpt_path
    assert code == 0, err[-3000:]
    assert f"resuming the run stopped by {sent.name} at step {step} from {checkpoint}" in err
    assert "not resumable" not in err and "Traceback" not in err
    assert "exists and is not empty" not in err  # Lightning's warning about the run's own checkpoint directory
    assert _losses(losses) == uninterrupted  # every step once, each loss equal to the uninterrupted run's

    code, err = _run(command, losses)  # a finished run is still refused, naming the flag
    assert code == 2 and f"holds an earlier run's checkpoint {checkpoint}: pass --ckpt_path" in err, err[-3000:]
