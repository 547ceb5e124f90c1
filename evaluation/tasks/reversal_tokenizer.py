"""A word-level tokenizer for the reversal task: one token per word or punctuation mark.

The byte tokenizer spends ~6 tokens on a word, so a 20-word reversal prompt plus
its answer is ~250 tokens, too long to train many small models on a CPU. This
tokenizer gives one token per word instead (a 20-word example is 52 tokens, a
30-word one 72), which is also what the REPO paper's reversal probe measures:
positions of words, not of characters.

Vocabulary, in this order (so ids never depend on anything but this file and
`evaluation.tasks.reversal`):

- 0 `<pad>`, 1 `<eos>`, 2 `<unk>` (pad 0 and eos 1, as `presets.tiny` and the
  byte tokenizer use);
- the template's words and punctuation, in order of first appearance
  (`Reverse the order of the words . Words : Reversed`);
- the task's 100 words (`reversal.VOCABULARY`), in list order.

Pre-tokenisation is `Whitespace` (`\\w+|[^\\w\\s]+`): spaces and newlines only
separate tokens and are not tokens themselves, so "words.\\nWords:" is
`words . Words :`. Decoding joins tokens with one space. A prompt therefore
does not survive a round trip character for character (the newlines become
spaces and punctuation gets a space before it), but every word sequence does:
`decode(encode(" stone river lamp"))` is "stone river lamp", which is all the
task's exact match compares. A word outside the vocabulary becomes `<unk>` (id 2)
rather than an error, so the harness can still score a prompt that contains
one (as wrong); `unknown_words` lists such words for callers that must refuse
them, as the reversal reproduction does for its training data.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer
from tokenizers import models as tok_models
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast

from evaluation.tasks.reversal import VOCABULARY, build_reversal_prompt

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)


def _pre_tokenize(text: str) -> list[str]:
    return [piece for piece, _ in Whitespace().pre_tokenize_str(text)]


def template_tokens() -> tuple[str, ...]:
    """The prompt template's words and punctuation, in order of first appearance."""
    prompt, _ = build_reversal_prompt(["lamp"])
    return tuple(dict.fromkeys(t for t in _pre_tokenize(prompt) if t not in VOCABULARY))


def reversal_vocabulary(words: Iterable[str] = VOCABULARY) -> dict[str, int]:
    """Token -> id: the special tokens, the template's tokens, then `words` (duplicates keep their first id)."""
    tokens = [*SPECIAL_TOKENS, *template_tokens(), *words]
    for token in tokens:
        if token not in SPECIAL_TOKENS and _pre_tokenize(token) != [token]:
            raise ValueError(f"{token!r} is not a single word or punctuation run; every vocabulary entry must be one")
    return {token: index for index, token in enumerate(dict.fromkeys(tokens))}


def reversal_tokenizer(words: Iterable[str] = VOCABULARY) -> PreTrainedTokenizerFast:
    """The word-level tokenizer (see the module docstring); `save_pretrained(DIR)` it next to a model."""
    backend = Tokenizer(tok_models.WordLevel(vocab=reversal_vocabulary(words), unk_token=UNK))
    backend.pre_tokenizer = Whitespace()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=10**9,
    )


def unknown_words(tokenizer: PreTrainedTokenizerFast, text: str) -> list[str]:
    """The tokens of `text` that the tokenizer does not know (they would encode as `<unk>`), in order."""
    vocabulary = tokenizer.get_vocab()
    return [token for token in _pre_tokenize(text) if token not in vocabulary]
