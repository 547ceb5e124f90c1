"""What autograd saves for backward, in bytes: the measure the memory plan's and the engine switches' tests share.

Each storage is counted once (the q, k and v projections save one input) and the model's weights are left
out (they are held anyway, not activations).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class SavedStorages:
    """The distinct storages autograd saves while `recording()` is open (and `on`), weights left out."""

    def __init__(self, model: torch.nn.Module):
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.sizes: dict[int, int] = {}
        self.on = True  # a test may start counting later, e.g. from a module's forward hook

    def keep(self, tensor: torch.Tensor) -> torch.Tensor:
        """Count `tensor`'s storage (also for tensors a checkpointed module holds itself, outside autograd)."""
        storage = tensor.untyped_storage()
        if self.on and storage.data_ptr() not in self.weights:
            self.sizes[storage.data_ptr()] = storage.nbytes()
        return tensor

    @contextmanager
    def recording(self) -> Iterator[SavedStorages]:
        with torch.autograd.graph.saved_tensors_hooks(self.keep, lambda tensor: tensor):
            yield self

    @property
    def total(self) -> int:
        return sum(self.sizes.values())
