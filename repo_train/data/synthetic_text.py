"""The synthetic corpus as text: each episode of `SyntheticDataset` written as one short line, then tokenised.

Why: a model trained on the id corpus has token ids but no tokenizer, so its export is not a model the
evaluation can read. Written as text and tokenised by a real tokenizer (the built-in byte tokenizer,
`tokenizer: byte`, by default), the same skills train a model whose export carries the tokenizer it was
trained with. The tiny configs train on this.

One line per episode, its content words as letters (word 0 is `a`, 25 `z`, 26 `aa`, ...: the frequent
words are short):

    copy: b a c | b a c
    reverse: b a c | c a b
    kv: d=a b=f e=a ? b=f
    repeat: a c a c a c

Each line is followed by the tokenizer's EOS, lines are packed back to back and cut at exactly seq_len
tokens (the last one usually truncated). `parse_episode` reads a line back into the id episode it was
written from, so the text keeps everything the ids said.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from repo_train.data.base import TokenSequenceDataset, check_seq_len
from repo_train.data.synthetic import (
    COPY_ID,
    EOS_ID,
    FIRST_WORD_ID,
    KV_ID,
    MIN_VOCAB_SIZE,
    QUERY_ID,
    REPEAT_ID,
    REVERSE_ID,
    SEP_ID,
    SyntheticDataset,
)
from repo_train.data.text import adopt_tokenizer

#: Each task's marker id and the word its line starts with.
MARKERS = {
    "copy": (COPY_ID, "copy"),
    "reverse": (REVERSE_ID, "reverse"),
    "kv": (KV_ID, "kv"),
    "ngram": (REPEAT_ID, "repeat"),
}
_TASK_OF_WORD = {word: task for task, (_, word) in MARKERS.items()}
#: The fewest content words: as many as the id corpus needs (`MIN_VOCAB_SIZE` ids, 16 of them special).
MIN_WORDS = MIN_VOCAB_SIZE - FIRST_WORD_ID


def word_text(index: int) -> str:
    """Content word `index` (0-based) as lower-case letters, bijective base 26: 0 `a`, 25 `z`, 26 `aa`."""
    letters = []
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters.append(chr(ord("a") + rest))
    return "".join(reversed(letters))


def word_index(text: str) -> int:
    """The inverse of `word_text`."""
    if not text or not all("a" <= char <= "z" for char in text):
        raise ValueError(f"{text!r} is not a word of the synthetic text (lower-case letters a-z)")
    value = 0
    for char in text:
        value = value * 26 + ord(char) - ord("a") + 1
    return value - 1


def _words(ids) -> str:
    return " ".join(word_text(int(i) - FIRST_WORD_ID) for i in ids)


def _ids(text: str) -> list[int]:
    return [FIRST_WORD_ID + word_index(word) for word in text.split()]


def render_episode(task: str, tokens: np.ndarray) -> str:
    """One episode of the id corpus (marker ... EOS, as `SyntheticDataset.episode_stream` makes it) as its line."""
    marker, word = MARKERS[task]
    tokens = [int(t) for t in tokens]
    if tokens[0] != marker or tokens[-1] != EOS_ID:
        raise ValueError(f"not a whole {task} episode (marker {marker} ... EOS {EOS_ID}): {tokens}")
    body = tokens[1:-1]
    if task in ("copy", "reverse"):
        split = body.index(SEP_ID)
        return f"{word}: {_words(body[:split])} | {_words(body[split + 1 :])}"
    if task == "kv":
        listing, (query, key, value) = body[:-3], body[-3:]
        if query != QUERY_ID:
            raise ValueError(f"a kv episode ends in QUERY key value EOS, got {tokens}")
        pairs = " ".join(f"{_words([k])}={_words([v])}" for k, v in zip(listing[::2], listing[1::2], strict=True))
        return f"{word}: {pairs} ? {_words([key])}={_words([value])}"
    return f"{word}: {_words(body)}"


def parse_episode(line: str) -> tuple[str, np.ndarray]:
    """(task, tokens) of the id episode `line` was rendered from (`render_episode`'s inverse)."""
    head, colon, rest = line.partition(": ")
    task = _TASK_OF_WORD.get(head)
    if not colon or task is None:
        raise ValueError(f"{line!r} does not start with one of {sorted(_TASK_OF_WORD)} and ': '")
    marker = MARKERS[task][0]
    if task in ("copy", "reverse"):
        span, bar, answer = rest.partition(" | ")
        if not bar:
            raise ValueError(f"a {task} line has ' | ' between the span and the answer: {line!r}")
        body = [*_ids(span), SEP_ID, *_ids(answer)]
    elif task == "kv":
        listing, mark, asked = rest.partition(" ? ")
        if not mark:
            raise ValueError(f"a kv line has ' ? ' before the query: {line!r}")
        pairs = [pair.partition("=") for pair in [*listing.split(), asked]]
        if any(not eq for _, eq, _ in pairs):
            raise ValueError(f"a kv line's pairs are key=value: {line!r}")
        ids = [FIRST_WORD_ID + word_index(part) for key, _, value in pairs for part in (key, value)]
        body = [*ids[:-2], QUERY_ID, *ids[-2:]]
    else:
        body = _ids(rest)
    return task, np.asarray([marker, *body, EOS_ID], dtype=np.int64)


class SyntheticTextDataset(TokenSequenceDataset):
    """`num_samples` deterministic sequences of the synthetic episodes written as text lines and tokenised."""

    def __init__(
        self,
        num_samples: int = 4096,
        seq_len: int = 128,
        tokenizer: str | Path | PreTrainedTokenizerBase = "byte",
        seed: int = 0,
        copy_weight: float = 1.0,
        reverse_weight: float = 1.0,
        kv_weight: float = 1.0,
        ngram_weight: float = 1.0,
        max_span: int = 12,
        max_pairs: int = 8,
        num_words: int = 240,
        vocab_size: int | None = None,
    ) -> None:
        check_seq_len(seq_len)
        if num_words < MIN_WORDS:
            raise ValueError(f"num_words must be >= {MIN_WORDS}, got {num_words}; the default is 240.")
        # The episodes (and every check of their options) are the id corpus's, with num_words content words.
        self.source = SyntheticDataset(
            num_samples=num_samples,
            seq_len=seq_len,
            vocab_size=FIRST_WORD_ID + num_words,
            seed=seed,
            copy_weight=copy_weight,
            reverse_weight=reverse_weight,
            kv_weight=kv_weight,
            ngram_weight=ngram_weight,
            max_span=max_span,
            max_pairs=max_pairs,
        )
        self.num_samples = num_samples
        self.seq_len = seq_len
        self.seed = seed
        adopt_tokenizer(self, tokenizer, vocab_size, eos_role="ends each line")

    def __len__(self) -> int:
        return self.num_samples

    def lines(self, index: int) -> Iterator[str]:
        """The endless text lines of sample `index` (the first ones fill it)."""
        for task, tokens in self.source.episode_stream(index):
            yield render_episode(task, tokens)

    def _sequence(self, index: int) -> torch.Tensor:
        ids: list[int] = []
        for line in self.lines(index):
            ids += self.tokenizer(line, add_special_tokens=False)["input_ids"]
            ids.append(self.eos_token_id)
            if len(ids) >= self.seq_len:
                return torch.tensor(ids[: self.seq_len], dtype=torch.long)
        raise AssertionError("the episode stream is endless")
