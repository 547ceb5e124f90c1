"""How to generate (`DecodeSettings`) and how a too-long prompt may be cut (`TRUNCATION_POLICIES`).

A module of its own, plain Python (no torch): the decode loop below the methods (`evaluation.methods.decoding`),
the task pipeline (`evaluation.generation`) and the command's config (`evaluation.run_config`, which must load
without torch) all take these, so they sit below all three.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How a too-long prompt may be cut (`DecodeSettings.truncate`); None = refused.
TRUNCATION_POLICIES = ("left", "middle")


@dataclass(frozen=True)
class DecodeSettings:
    """How to generate: greedy, up to `max_new_tokens`, stopping at EOS or a stop string."""

    max_new_tokens: int = 32
    """Most tokens generated per prompt."""
    stop_strings: tuple[str, ...] = ()
    """Generation of a row stops once its text contains one of these; the text is cut before it."""
    batch_size: int = 8
    """Prompts per forward (sorted by length, left-padded)."""
    max_length: int | None = None
    """Budget of prompt + new tokens; None = the model's max_position_embeddings."""
    truncate: str | None = None
    """None: a too-long prompt is an error; 'left' drops its start, 'middle' its middle."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.truncate is not None and self.truncate not in TRUNCATION_POLICIES:
            raise ValueError(f"truncate must be one of {list(TRUNCATION_POLICIES)} or None, got {self.truncate!r}")
        if isinstance(self.stop_strings, str):
            raise TypeError(f"stop_strings must be a tuple of strings, got the string {self.stop_strings!r}")
