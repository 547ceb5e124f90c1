"""The byte-level tokenizer of the built-in tiny default, built offline: one token per UTF-8 byte.

A module of its own, below both of its users: `evaluation.model_loading` (the tiny default) and the tasks
that measure lengths in its tokens (`evaluation.tasks.ruler`, `tokenizer='byte'`), which must not load the
model code to get it.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders
from tokenizers import models as tok_models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

#: Special tokens of the byte tokenizer, ids 0 and 1 (the ids `presets.tiny` uses); byte b is id b + 2.
BYTE_SPECIALS = ("<pad>", "<eos>")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer built offline: one token per UTF-8 byte (id = byte + 2), `<pad>`=0, `<eos>`=1.

    A BPE model without merges over the 256-byte alphabet, so offsets map every
    token back to its characters (what the harness uses for item spans).
    """
    table = _bytes_to_unicode()
    assert set(table.values()) == set(ByteLevel.alphabet())
    vocab = {name: i for i, name in enumerate(BYTE_SPECIALS)}
    vocab.update({table[b]: b + len(BYTE_SPECIALS) for b in range(256)})
    backend = Tokenizer(tok_models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(BYTE_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", padding_side="left", model_max_length=10**9
    )
