"""A prompt's token ids packed as 32-bit integers.

A run holds every fitted prompt in memory for all its methods. As a tuple of
Python ints a token costs about 36 bytes (an 8-byte slot plus a 28-byte int
object: ids above 256 are not shared), so 20-document MDQA with the gold at
every position (2,000 questions × 20 prompts × ~3,000 tokens) held about
4 GB per process, once per torchrun rank. Packed it costs 4 bytes a token.

`TokenIds` is an immutable sequence of ints: it compares equal to a tuple or
list of the same ids (and hashes like that tuple), slices and concatenates to
`TokenIds`, and `as_tensor` gives the int64 tensor without a Python int per
token. Every vocabulary in use fits int32; a larger id is refused.
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Sequence
from typing import overload

import torch


class TokenIds(Sequence[int]):
    """Token ids, immutable, 4 bytes each."""

    __slots__ = ("_ids",)

    def __init__(self, ids: Iterable[int] = ()) -> None:
        if isinstance(ids, TokenIds):
            packed = ids._ids
        else:
            try:
                packed = array.array("i", ids)
            except OverflowError as error:
                raise ValueError(
                    f"a token id does not fit 32 bits ({error}); token ids are vocabulary indices"
                ) from None
        object.__setattr__(self, "_ids", packed)

    @staticmethod
    def _wrap(packed: array.array) -> TokenIds:
        wrapped = TokenIds()
        object.__setattr__(wrapped, "_ids", packed)
        return wrapped

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TokenIds are immutable")

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> TokenIds: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return TokenIds._wrap(self._ids[index])
        return self._ids[index]

    def __iter__(self):
        return iter(self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenIds):
            return self._ids == other._ids
        if isinstance(other, tuple | list):
            return len(other) == len(self._ids) and all(a == b for a, b in zip(self._ids, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._ids))  # equal to a tuple of the same ids, so it must hash alike

    def __add__(self, other: Iterable[int]) -> TokenIds:
        return TokenIds._wrap(self._ids + TokenIds(other)._ids)

    def __radd__(self, other: Iterable[int]) -> TokenIds:
        return TokenIds(other) + self

    def __repr__(self) -> str:
        return f"TokenIds({self._ids.tolist()})"

    def __reduce__(self):
        return (TokenIds, (self._ids.tolist(),))

    def as_tensor(self) -> torch.Tensor:
        """The ids as an int64 tensor (one copy, no Python int per token)."""
        if not self._ids:
            return torch.zeros(0, dtype=torch.long)
        return torch.frombuffer(self._ids, dtype=torch.int32).long()  # .long() copies: nothing shares the array
