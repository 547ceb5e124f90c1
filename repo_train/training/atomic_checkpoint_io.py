"""Checkpoints written atomically: a temporary file beside the target, fsynced, then renamed over it.

Lightning's own writer stages the file in the system's temp directory and then moves it; across file
systems that move is a copy, and a disk that fills during it leaves a truncated `last.ckpt` beside the
good ones. Here a full disk leaves the earlier checkpoint as it was and stops the run with one line
naming the file (`repo_common.atomic.writing_to`). DeepSpeed writes its own checkpoint directories and
does not use this.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from repo_common.atomic import atomic_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose saves are all-or-nothing on the local file system."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        with atomic_path(path, suffix=".ckpt.tmp") as tmp, open(tmp, "wb") as handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())
