"""A synthetic corpus that needs no files: the built-in tiny default and the test data.

Each sequence is BOS followed by short "episodes" packed back to back and cut at
exactly seq_len (the last episode is usually truncated, as documents are in real
pretraining data). Episodes mix skills that depend on position:

- copy / reverse: `COPY w1..wn SEP w1..wn EOS` or `REVERSE w1..wn SEP wn..w1 EOS`;
- key-value lookup: `KV k1 v1 .. kk vk QUERY kq vq EOS`, where the queried pair sits
  anywhere in the list, so the answer's source position varies;
- repeated n-grams: `REPEAT g1..gn g1..gn .. EOS`.

Content words follow a Zipf law, so even a model that has learnt only unigram
statistics and the episode grammar is clearly better than uniform; copying and
lookup then lower the loss further. Sample i comes from a generator seeded by
(seed, i) alone, so any sample is regenerated independently, in any order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from repo_train.data.base import TokenSequenceDataset, check_seed, check_seq_len

PAD_ID, BOS_ID, EOS_ID, SEP_ID = 0, 1, 2, 3
COPY_ID, REVERSE_ID, KV_ID, QUERY_ID, REPEAT_ID = 4, 5, 6, 7, 8
#: Ids below this are special (9..15 are reserved, unused); content words start here.
FIRST_WORD_ID = 16
MIN_VOCAB_SIZE = 32
TASKS = ("copy", "reverse", "kv", "ngram")
ZIPF_EXPONENT = 1.0
# A constant mixed into every per-sample seed so sample streams never coincide with epoch orders.
_STREAM = 0x53594E54


class SyntheticDataset(TokenSequenceDataset):
    """`num_samples` deterministic sequences of copy / reverse / key-value / n-gram episodes."""

    def __init__(
        self,
        num_samples: int = 4096,
        seq_len: int = 128,
        vocab_size: int = 256,
        seed: int = 0,
        copy_weight: float = 1.0,
        reverse_weight: float = 1.0,
        kv_weight: float = 1.0,
        ngram_weight: float = 1.0,
        max_span: int = 12,
        max_pairs: int = 8,
    ) -> None:
        check_seq_len(seq_len)
        check_seed(seed)
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
        if vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(
                f"vocab_size must be >= {MIN_VOCAB_SIZE} (ids 0..{FIRST_WORD_ID - 1} are special tokens), "
                f"got {vocab_size}; the default is 256."
            )
        weights = np.array([copy_weight, reverse_weight, kv_weight, ngram_weight], dtype=np.float64)
        if (weights < 0).any() or not np.isfinite(weights).all() or weights.sum() == 0:
            raise ValueError(
                f"task weights (copy, reverse, kv, ngram) must be finite, >= 0 and not all 0, got {weights.tolist()}."
            )
        num_words = vocab_size - FIRST_WORD_ID
        if max_span < 2:
            raise ValueError(f"max_span must be >= 2, got {max_span}.")
        if not 2 <= max_pairs <= num_words:
            raise ValueError(f"max_pairs must be in [2, {num_words}] (keys are distinct words), got {max_pairs}.")
        self.num_samples = num_samples
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.seed = seed
        self.eos_token_id = EOS_ID
        self.pad_token_id = PAD_ID
        self.bos_token_id = BOS_ID
        self.max_span = max_span
        self.max_pairs = max_pairs
        self.task_probs = weights / weights.sum()
        ranks = np.arange(1, num_words + 1, dtype=np.float64)
        zipf = ranks**-ZIPF_EXPONENT
        self._word_cdf = np.cumsum(zipf / zipf.sum())

    def __len__(self) -> int:
        return self.num_samples

    def _words(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` Zipf-distributed content words."""
        picks = np.searchsorted(self._word_cdf, rng.random(count), side="right")
        return FIRST_WORD_ID + np.minimum(picks, len(self._word_cdf) - 1)

    def _episode(self, task: str, rng: np.random.Generator) -> np.ndarray:
        if task in ("copy", "reverse"):
            span = self._words(rng, int(rng.integers(2, self.max_span + 1)))
            marker, answer = (COPY_ID, span) if task == "copy" else (REVERSE_ID, span[::-1])
            parts = [[marker], span, [SEP_ID], answer, [EOS_ID]]
        elif task == "kv":
            pairs = int(rng.integers(2, self.max_pairs + 1))
            keys = FIRST_WORD_ID + rng.choice(len(self._word_cdf), size=pairs, replace=False)
            values = self._words(rng, pairs)
            asked = int(rng.integers(pairs))
            listing = np.stack([keys, values], axis=1).reshape(-1)
            parts = [[KV_ID], listing, [QUERY_ID, keys[asked], values[asked], EOS_ID]]
        else:
            gram = self._words(rng, int(rng.integers(2, 7)))
            parts = [[REPEAT_ID], np.tile(gram, int(rng.integers(3, 7))), [EOS_ID]]
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])

    def episode_stream(self, index: int) -> Iterator[tuple[str, np.ndarray]]:
        """The endless (task, tokens) episodes of sample `index`, from its own seed: `episodes` takes as many as
        fill seq_len ids, the text form (`synthetic_text`) as many as fill seq_len tokens of its lines."""
        rng = np.random.default_rng([self.seed, int(index), _STREAM])
        while True:
            task = TASKS[int(rng.choice(len(TASKS), p=self.task_probs))]
            yield task, self._episode(task, rng)

    def episodes(self, index: int) -> list[tuple[str, np.ndarray]]:
        """The (task, tokens) episodes of sample `index` in order, before packing and truncation."""
        out: list[tuple[str, np.ndarray]] = []
        length = 1  # BOS
        stream = self.episode_stream(index)
        while length < self.seq_len:
            task, tokens = next(stream)
            out.append((task, tokens))
            length += len(tokens)
        return out

    def _sequence(self, index: int) -> torch.Tensor:
        pieces = [np.array([BOS_ID], dtype=np.int64)] + [tokens for _, tokens in self.episodes(index)]
        return torch.from_numpy(np.concatenate(pieces)[: self.seq_len])
