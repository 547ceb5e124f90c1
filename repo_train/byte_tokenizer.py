"""The byte-level tokenizer of the tiny models, built offline: one token per UTF-8 byte, named `byte`.

It lives in `repo_train`, below the evaluation, because training uses it too: a data source's `tokenizer:
byte` (`repo_train.data.text.load_tokenizer`) trains the tiny configs on text through it, and `export`
writes its files beside the weights, so the evaluation reads the tokenizer the model was trained with.
The evaluation's built-in tiny default and the tasks that measure lengths in its tokens
(`evaluation.tasks.ruler`, `tokenizer='byte'`) import it from here; this module loads no model code.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders
from tokenizers import models as tok_models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

#: Special tokens of the byte tokenizer, ids 0 and 1 (the ids `presets.tiny` uses); byte b is id b + 2.
BYTE_SPECIALS = ("<pad>", "<eos>")
#: What a `tokenizer` option (a data source's, `export --tokenizer`) names this tokenizer by; a directory of
#: that name is `./byte`.
BYTE_TOKENIZER_NAME = "byte"
#: Its ids: the two specials and the 256 bytes.
BYTE_VOCAB_SIZE = len(BYTE_SPECIALS) + 256


def names_byte_tokenizer(location: object) -> bool:
    """Whether a `tokenizer` option names the built-in byte tokenizer (the string `byte`, not a path object)."""
    return isinstance(location, str) and location == BYTE_TOKENIZER_NAME


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
