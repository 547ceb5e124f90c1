"""A KV cache that appends a decoding step in place, instead of copying the whole cache every step.

HF's `DynamicLayer` grows by `torch.cat([keys, new])`: every decoding step
copies the layer's whole K/V into a fresh tensor. On a CPU at ~1,000 prompt
tokens that copy (and the page faults of the fresh tensor) was 60% of the
baseline's decoding step and 67% of Attention Buckets' (24 rows), more than the
attention itself (`python -m workflows benchmark-calibrators`, docs/methods/baselines.md).
`ReservedLayer` keeps K and V in buffers with room for `reserve` more tokens
and writes each step into that room: `keys` / `values` are views of the filled
part, with the same values as the concatenation, so attention gives the same
logits (tested against `DynamicCache`). When the room runs out, the buffers
grow by the step's tokens plus `reserve` (one copy per `reserve` steps).

Code that replaces `keys` / `values` (a crop, Found in the Middle dropping the
last prompt token) is followed: when `keys` is no longer a prefix view of the
buffer, the next update copies it into a new buffer. A view handed out before
a crop may see the cropped slots overwritten; nothing in this package keeps one.
"""

from __future__ import annotations

from functools import partial

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

#: Room a layer keeps for tokens not yet appended when its owner gives no better number.
DEFAULT_RESERVE = 64


class ReservedLayer(DynamicLayer):
    """`DynamicLayer` whose K/V live in buffers with spare room: appending writes in place (module docstring)."""

    def __init__(self, reserve: int = DEFAULT_RESERVE):
        super().__init__()
        if reserve < 1:
            raise ValueError(f"a reserved cache layer needs room for at least 1 token, got {reserve}")
        self.reserve = reserve
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _holds_prefix(self, new: torch.Tensor, current: torch.Tensor | None, buffer: torch.Tensor) -> bool:
        """Whether `current` is the buffer's first tokens (so `new` can be written after them in place)."""
        return (
            current is not None
            and current.data_ptr() == buffer.data_ptr()
            and current.stride() == buffer.stride()
            and current.shape[:2] == buffer.shape[:2] == new.shape[:2]
            and current.shape[-1] == buffer.shape[-1] == new.shape[-1]
            and current.dtype == buffer.dtype == new.dtype
            and current.device == buffer.device == new.device
        )

    def _regrown(self, current: torch.Tensor | None, new: torch.Tensor, length: int) -> torch.Tensor:
        """A buffer for `length` + `new` tokens plus `reserve`, holding `current` (the cached tokens) first."""
        shape = (*new.shape[:-2], length + new.shape[-2] + self.reserve, new.shape[-1])
        buffer = torch.empty(shape, dtype=new.dtype, device=new.device)
        if length:
            buffer[..., :length, :].copy_(current)
        return buffer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        buffers = self._buffers
        fits = (
            buffers is not None
            and end <= buffers[0].shape[-2]
            and (length == 0 or self._holds_prefix(key_states, self.keys, buffers[0]))
            and (length == 0 or self._holds_prefix(value_states, self.values, buffers[1]))
            and buffers[0].shape[:2] == key_states.shape[:2]
            and buffers[0].shape[-1] == key_states.shape[-1]
            and buffers[1].shape[-1] == value_states.shape[-1]
        )
        if not fits:
            buffers = (
                self._regrown(self.keys if length else None, key_states, length),
                self._regrown(self.values if length else None, value_states, length),
            )
            self._buffers = buffers
        buffers[0][..., length:end, :].copy_(key_states)
        buffers[1][..., length:end, :].copy_(value_states)
        self.keys, self.values = buffers[0][..., :end, :], buffers[1][..., :end, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._buffers = None
        super().reset()


def reserved_cache(model, reserve: int = DEFAULT_RESERVE) -> DynamicCache:
    """A `DynamicCache` for `model` whose full-attention layers are `ReservedLayer`s with room for `reserve` tokens.

    Other layer kinds (sliding windows) keep HF's own classes."""
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    cache.layers = [ReservedLayer(reserve) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if cache.layer_class_to_replicate is DynamicLayer:  # a config without layer types: layers made on first use
        cache.layer_class_to_replicate = partial(ReservedLayer, reserve)
    return cache
