"""Text reversal (the REPO paper's appendix C probe): reverse a sequence of words.

Reversal needs every output token to attend to one exact input position, far
or near, so it exposes how a position method orders tokens. The REPO paper
trains on lengths 2-20 and tests 2-30 (lengths past 20 measure extrapolation);
both ranges are parameters here. The paper's exact vocabulary and prompt are
not in our sources, so the format below is this project's own:

    Reverse the order of the words.
    Words: lamp river stone
    Reversed:

with the answer " stone river lamp". Words are distinct within a sequence and
drawn from a built-in list of common nouns (one word each, no articles).

Rows: one per (length, example); `gold_position` = length - min_length and
`num_positions` = max_length - min_length + 1, so accuracy "by position" is
accuracy by length; `item_spans` are the input words. Score: exact match of
the word sequence (whitespace-split, case-sensitive, nothing else allowed).
`reversal_training_words` draws training word lists from a separate seed
stream, and `reversal_training_sequences` makes their prompts as token
sequences with loss labels on the answer only, for training a reproduction
(`python -m workflows reproduce-reversal`, with the word-level tokenizer of
`evaluation.tasks.reversal_tokenizer`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from typing import Any

from evaluation.tasks.base import Task, example_rng, join_items

_VOCABULARY_TEXT = (
    "lamp river stone cloud table window garden bread candle forest mirror pencil rocket shadow tiger "
    "violin wagon yellow zebra anchor bottle carpet desert engine feather guitar hammer island jungle "
    "kettle ladder marble needle orange pillow rabbit saddle ticket valley walrus basket cactus dragon "
    "falcon glove harbor igloo jacket koala lemon magnet napkin olive parrot quartz ribbon sailor turtle "
    "umbrella velvet whistle button cherry dolphin eagle fountain giraffe honey insect jelly kitten "
    "lizard meadow nickel oyster pepper quiver raven spider tomato tunnel vessel wheel blanket copper "
    "drum ember forge granite helmet iron jewel knot lantern mango nest orbit piano puzzle rain salt "
    "thunder"
)
VOCABULARY = tuple(_VOCABULARY_TEXT.split())
INSTRUCTION = "Reverse the order of the words.\nWords: "


def build_reversal_prompt(words: Sequence[str]) -> tuple[str, list[list[int]]]:
    """The prompt (ending in 'Reversed:') and the span of each input word."""
    return join_items(INSTRUCTION, list(words), "\nReversed:", separator=" ")


def reversed_answer(words: Sequence[str]) -> str:
    """The expected completion, without the leading space the prompt leaves to the model."""
    return " ".join(reversed(words))


def sample_words(rng: random.Random, length: int, vocabulary: Sequence[str] = VOCABULARY) -> list[str]:
    """`length` distinct words of the vocabulary, in a seeded order."""
    if length > len(vocabulary):
        raise ValueError(f"length {length} exceeds the vocabulary ({len(vocabulary)} words); pass a larger vocabulary")
    return rng.sample(list(vocabulary), length)


def reversal_exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the prediction's words are exactly a gold answer's words (whitespace-split, case-sensitive)."""
    if isinstance(answers, str) or not answers:
        raise ValueError(f"answers must be a non-empty list of strings, got {answers!r}")
    return float(any(prediction.split() == answer.split() for answer in answers))


def _check_range(min_length: int, max_length: int) -> None:
    for name, value in (("min_length", min_length), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if min_length > max_length:
        raise ValueError(f"min_length={min_length} > max_length={max_length}; the paper uses 2-20 (train), 2-30 (test)")


@dataclasses.dataclass(kw_only=True)
class ReversalTask(Task):
    """Word-sequence reversal at every length of [min_length, max_length]; num_examples sequences per length."""

    name = "reversal"
    metric_name = "reversal_exact_match"

    min_length: int = 2
    """Shortest sequence (words)."""
    max_length: int = 30
    """Longest sequence (words); the paper tests up to 30 after training up to 20."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_examples is None:
            raise ValueError("reversal generates its examples: pass num_examples= (sequences per length)")
        _check_range(self.min_length, self.max_length)
        sample_words(random.Random(0), self.max_length)  # the vocabulary must be large enough

    def generation_defaults(self) -> tuple[int, tuple[str, ...]]:
        """Room for 30 words even with a byte-level tokenizer; the answer is the first line."""
        return 256, ("\n",)

    def score(self, prediction: str, answers: Sequence[str]) -> float:
        return reversal_exact_match(prediction, answers)

    def extra_features(self) -> dict[str, Any]:
        return {"length": "int64", "words": ["string"]}

    def rows(self) -> Iterator[dict[str, Any]]:
        count = self.max_length - self.min_length + 1
        for length in range(self.min_length, self.max_length + 1):
            for index in self.example_indices():
                words = sample_words(example_rng(self.seed, self.name, length, index), length)
                prompt, spans = build_reversal_prompt(words)
                row_id = f"reversal-n{length:02d}-s{self.seed}-ex{index:05d}"
                yield {
                    "id": row_id,
                    "example_id": row_id,
                    "task": self.name,
                    "prompt": prompt,
                    "answers": [reversed_answer(words)],
                    "gold_position": length - self.min_length,
                    "num_positions": count,
                    "item_spans": spans,
                    "length": length,
                    "words": words,
                }


def reversal_training_words(
    num_sequences: int,
    min_length: int = 2,
    max_length: int = 20,
    seed: int = 0,
    vocabulary: Sequence[str] = VOCABULARY,
) -> list[list[str]]:
    """The word lists of training sequences: lengths uniform on [min_length, max_length].

    They come from a seed stream separate from `ReversalTask`'s, so training and
    test sequences of the same seed differ (short ones can still coincide by chance).
    """
    _check_range(min_length, max_length)
    if isinstance(num_sequences, bool) or not isinstance(num_sequences, int) or num_sequences < 1:
        raise ValueError(f"num_sequences must be an int >= 1, got {num_sequences!r}")
    out = []
    for index in range(num_sequences):
        rng = example_rng(seed, "reversal-train", index)
        out.append(sample_words(rng, rng.randint(min_length, max_length), vocabulary))
    return out


def reversal_training_sequences(
    tokenizer,
    num_sequences: int,
    min_length: int = 2,
    max_length: int = 20,
    seed: int = 0,
    vocabulary: Sequence[str] = VOCABULARY,
) -> list[dict[str, list[int]]]:
    """Token sequences for training on reversal: the evaluation prompt, the answer, EOS.

    Each item has `input_ids` and `labels` (-100 on the prompt, so only the answer
    and EOS are learned), for the words of `reversal_training_words`.
    """
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = []
    for words in reversal_training_words(num_sequences, min_length, max_length, seed, vocabulary):
        prompt, _ = build_reversal_prompt(words)
        prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        answer_ids = tokenizer(" " + reversed_answer(words), add_special_tokens=False)["input_ids"] + eos
        out.append({"input_ids": prompt_ids + answer_ids, "labels": [-100] * len(prompt_ids) + answer_ids})
    return out
