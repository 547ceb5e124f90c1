"""Named model sizes: the tiny one every test and the built-in demo use, its byte-tokenizer twin the tiny
training configs use, and the paper's OLMo-2 shapes.

The 1B / 7B shapes are those of the public OLMo-2 checkpoints the REPO paper
continues from (OLMo-2-0425-1B and OLMo-2-1124-7B configs): dolma2 tokenizer
(vocab padded to 100,352), 4,096-token context, RoPE base 500,000.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from repo_common.registry import Registry

if TYPE_CHECKING:
    from repo_train.modeling.configuration import RePoOlmo2Config

#: Every model size by its name (`model.preset_name`, `demo --preset`); `register_preset(NAME)` adds one.
PRESETS: Registry[Callable[..., RePoOlmo2Config]] = Registry("model preset")


def register_preset(name: str) -> Callable[[Callable[..., RePoOlmo2Config]], Callable[..., RePoOlmo2Config]]:
    """Function decorator: make a config factory `f(**overrides)` a preset called `name`; a function of another
    shape is refused here, at registration, not by a TypeError deep in `fit` (`check_preset_signature`)."""

    def register(factory: Callable[..., RePoOlmo2Config]) -> Callable[..., RePoOlmo2Config]:
        check_preset_signature(name, factory)
        return PRESETS.register(factory, name)

    return register


def check_preset_signature(name: str, factory: Any) -> None:
    """A preset is called as `factory(**overrides)`: it must be callable, take keyword overrides (`**overrides`)
    and need no other argument. Raises TypeError in one line naming the function and the shape it needs."""
    shape = f"def {getattr(factory, '__name__', 'preset')}(**overrides) -> RePoOlmo2Config"
    if not callable(factory):
        raise TypeError(f"@register_preset({name!r}) decorates {factory!r}, not a function; write {shape}")
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin without a signature: judged when called
    required = [p.name for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_overrides = any(p.kind is p.VAR_KEYWORD for p in parameters)
    if required or not takes_overrides:
        why = f"it requires {', '.join(required)}" if required else "it takes no **overrides"
        raise TypeError(f"@register_preset({name!r}): {factory.__name__} cannot be a preset ({why}); write {shape}")


_DOLMA2_TOKENS = dict(vocab_size=100352, eos_token_id=100257, pad_token_id=100277, bos_token_id=None)


def _config(fields: dict, overrides: dict) -> RePoOlmo2Config:
    """The config of a preset's fields with `overrides`: transformers loads here, when a preset is built, not when
    a parser lists PRESETS' names (`python -m repo_train demo --help`)."""
    from repo_train.modeling.configuration import RePoOlmo2Config  # heavy: transformers; PRESETS' names without it

    return RePoOlmo2Config(**{**fields, **overrides})


@register_preset("tiny")
def tiny(**overrides) -> RePoOlmo2Config:
    """A 4-layer, 64-wide OLMo-2 (about 0.1M parameters): seconds per step on a CPU."""
    fields = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rms_norm_eps=1e-6,
        # The ids of the built-in synthetic corpus (repo_train.data.synthetic).
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    return _config(fields, overrides)


#: The byte tokenizer's vocabulary and special ids (`repo_train.byte_tokenizer`, not imported here: it loads
#: transformers): <pad>=0, <eos>=1, byte b = id b + 2, no BOS.
_BYTE_TOKENS = dict(vocab_size=258, pad_token_id=0, eos_token_id=1, bos_token_id=None)


@register_preset("tiny-byte")
def tiny_byte(**overrides) -> RePoOlmo2Config:
    """`tiny` sized to the byte tokenizer (258 ids), as the evaluation's tiny default and the shipped tiny models
    are: the tiny configs train it on `SyntheticTextData`, and their exports carry that tokenizer."""
    return tiny(**{**_BYTE_TOKENS, **overrides})


def _olmo2(hidden: int, ffn: int, layers: int, heads: int, overrides: dict) -> RePoOlmo2Config:
    """An OLMo-2 shape with the dolma2 tokenizer, 4,096 context and RoPE base 500,000 (MHA)."""
    fields = dict(
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        **_DOLMA2_TOKENS,
    )
    return _config(fields, overrides)


@register_preset("olmo2-1b")
def olmo2_1b(**overrides) -> RePoOlmo2Config:
    """OLMo-2 1B: d=2048, 16 layers, 16 heads, FFN 8192; REPO from layer 5 by default."""
    return _olmo2(2048, 8192, 16, 16, overrides)


@register_preset("olmo2-7b")
def olmo2_7b(**overrides) -> RePoOlmo2Config:
    """OLMo-2 7B: d=4096, 32 layers, 32 heads, FFN 11008; REPO from layer 10 by default."""
    return _olmo2(4096, 11008, 32, 32, overrides)


def preset(name: str, **overrides) -> RePoOlmo2Config:
    """Config of a named size, with field overrides (e.g. position_method="repo")."""
    return PRESETS.lookup(name)(**overrides)
