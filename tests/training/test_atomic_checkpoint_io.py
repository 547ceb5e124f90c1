"""Checkpoints are all-or-nothing: a full disk keeps the earlier file and names the one it could not write."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from repo_train.training import atomic_checkpoint_io
from repo_train.training.atomic_checkpoint_io import AtomicCheckpointIO


def test_a_save_replaces_the_file_whole_and_reads_back(tmp_path):
    path = tmp_path / "run" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1, "w": torch.arange(4)}, path)
    io.save_checkpoint({"step": 2, "w": torch.arange(8)}, path)
    loaded = io.load_checkpoint(path)
    assert loaded["step"] == 2 and torch.equal(loaded["w"], torch.arange(8))
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temporary file left


def test_a_full_disk_keeps_the_earlier_checkpoint_and_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": 1}, path)
    before = path.read_bytes()

    def half_then_full(obj, handle):
        handle.write(b"x" * 1000)  # part of the new checkpoint reaches the disk, then it is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic_checkpoint_io.torch, "save", half_then_full)
    with pytest.raises(OSError, match=r"No space left on device while writing .*last\.ckpt; free space"):
        io.save_checkpoint({"step": 2}, path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_the_training_cli_trainer_writes_through_it(tmp_path, monkeypatch):
    from repo_train.training.cli import RePoCLI
    from repo_train.training.datamodule import RePoDataModule
    from repo_train.training.module import RePoLightningModule

    monkeypatch.chdir(tmp_path)
    cli = RePoCLI(RePoLightningModule, RePoDataModule, run=False, args=["--trainer.max_steps", "1"])
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)
