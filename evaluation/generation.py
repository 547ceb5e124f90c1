"""A task's prompts through greedy generation: tokenise, fit to the length budget, batch, decode.

Pipeline: `tokenize_prompts` (token ids + each item's token span, from the
tokenizer's offset mapping) -> `fit_to_length` (length check, or an explicit
truncation) -> `plan_batches` (by length) -> `collate` -> `generate_batch`.
`generate` chains them for a list of strings. `tokenize_and_fit` is the first
two in bounded memory (chunks of `TOKENIZE_CHUNK` prompts, lengths checked as
it goes, a refusal counts the rest by length only), for the harness's tasks of
tens of thousands of long prompts.

The last two steps, the explicit prefill + decode loop of one batch that the
methods plug into (and `TokenizedPrompt`, `Generation`), live in
`evaluation.methods.decoding`: some methods run that loop themselves, so it
sits below them, and this module imports it. `DecodeSettings` lives below
both, in `evaluation.decode_settings`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from evaluation.decode_settings import TRUNCATION_POLICIES
from evaluation.methods.base import MethodStack
from evaluation.methods.decoding import DecodeSettings, Generation, TokenizedPrompt, collate, generate_batch


def token_spans(offsets: Sequence[tuple[int, int]], char_spans: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Character spans -> token spans: the tokens whose characters overlap [start, end) of each span.

    Special tokens (empty offsets) never belong to an item. A token straddling an
    item boundary belongs to the item, so neighbouring spans may share a token under BPE.
    An item without tokens gets the empty span at the next token.
    """
    real = [i for i, (s, e) in enumerate(offsets) if e > s]
    starts = [offsets[i][0] for i in real]
    ends = [offsets[i][1] for i in real]
    out = []
    for char_start, char_end in char_spans:
        first = bisect.bisect_right(ends, char_start)  # first token ending after the item starts
        stop = bisect.bisect_left(starts, char_end)  # tokens starting before the item ends
        anchor = real[first] if first < len(real) else len(offsets)
        out.append((anchor, real[stop - 1] + 1) if stop > first else (anchor, anchor))
    return out


#: Prompts tokenised per call of the tokenizer: its output (ids, and offset mappings when item spans are
#: needed) exists for one chunk at a time, so tokenising a task costs memory for its token ids only.
TOKENIZE_CHUNK = 256


#: ... and at most this many characters per call (at least one prompt): long prompts make smaller calls
#: (a call's output takes ~0.3 KB per token with offsets: ~150 MB at this size).
TOKENIZE_CHARS = 2**19


class PromptsTooLongError(ValueError):
    """Prompts exceed the length budget and no truncation was asked for; the message gives counts and the options."""

    def __init__(self, too_long: int, total: int, limit: int, longest: int):
        self.too_long, self.total, self.limit, self.longest = too_long, total, limit, longest
        super().__init__(
            f"{too_long} of {total} prompts exceed the {limit}-token prompt limit (longest {longest} tokens; the "
            "limit is --max_length, else the model's max_position_embeddings, minus --max_new_tokens); raise "
            "--max_length, use fewer items per prompt (--num_keys / --num_documents), or pass --truncate middle|left"
        )


def tokenize_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    item_spans: Sequence[Sequence[Sequence[int]]] | None = None,
    chunk_size: int = TOKENIZE_CHUNK,
    add_special_tokens: bool = True,
) -> list[TokenizedPrompt]:
    """Token ids of each prompt and, from the offset mapping, the token span of each item (char spans).

    `add_special_tokens=False` for text that holds its own (a rendered chat template: `evaluation.prompt_format`).

    Tokenises `chunk_size` prompts at a time (`prompts` and `item_spans` are
    only sliced, so lazy columns such as a `datasets` column work): the
    tokenizer's output for a chunk, offset mappings included, is dropped
    before the next one.
    """
    return list(_tokenized_chunks(tokenizer, prompts, item_spans, chunk_size, special=add_special_tokens))


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], offsets: bool, special: bool) -> dict[str, Any]:
    """The tokenizer's output for a list of prompts, as every pass of this module calls it."""
    return tokenizer(texts, add_special_tokens=special, return_offsets_mapping=offsets)


def _tokenized_chunks(tokenizer, prompts, item_spans, chunk_size: int, start: int = 0, special: bool = True):
    """`TokenizedPrompt`s of prompts[start:], tokenised `chunk_size` at a time."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    need_offsets = item_spans is not None and getattr(tokenizer, "is_fast", False)
    for first in range(start, len(prompts), chunk_size):
        last = min(first + chunk_size, len(prompts))
        chunk_spans = list(item_spans[first:last]) if need_offsets else None
        done = 0
        for texts in _by_characters(list(prompts[first:last])):
            encoded = _encode(tokenizer, texts, need_offsets, special)
            for index, ids in enumerate(encoded["input_ids"]):
                spans: tuple[tuple[int, int], ...] = ()
                if need_offsets:
                    spans = tuple(token_spans(encoded["offset_mapping"][index], chunk_spans[done + index]))
                yield TokenizedPrompt(ids, spans)
            done += len(texts)
            del encoded


def _by_characters(texts: list[str]) -> Iterator[list[str]]:
    """`texts` in consecutive groups of at most `TOKENIZE_CHARS` characters (a longer text alone)."""
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) > TOKENIZE_CHARS:
            yield group
            group, size = [], 0
        group.append(text)
        size += len(text)
    if group:
        yield group


def token_lengths(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    chunk_size: int = TOKENIZE_CHUNK,
    start: int = 0,
    add_special_tokens: bool = True,
) -> Iterator[int]:
    """Token counts of prompts[start:], as `tokenize_prompts` counts them, a chunk at a time; keeps nothing else.

    A fast tokenizer's backend then counts without offsets or Python lists
    (`encode_batch_fast`, about twice as fast), once its counts have equalled
    the full call's on the first chunk (otherwise every chunk takes the full call).
    """
    counter, checked = None, False
    for first in range(start, len(prompts), chunk_size):
        for texts in _by_characters(list(prompts[first : first + chunk_size])):
            if counter is not None:
                yield from counter(texts)
                continue
            lengths = [len(ids) for ids in _encode(tokenizer, texts, False, add_special_tokens)["input_ids"]]
            if not checked:
                fast, checked = _backend_counter(tokenizer, add_special_tokens), True
                counter = fast if fast is not None and fast(texts) == lengths else None
            yield from lengths


def _backend_counter(tokenizer: PreTrainedTokenizerBase, add_special_tokens: bool = True):
    """Token counts straight from a fast tokenizer's backend (no offsets, no id lists), or None."""
    backend = getattr(tokenizer, "_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    encode = getattr(backend, "encode_batch_fast", None)
    if encode is None:
        return None
    return lambda texts: [len(encoding) for encoding in encode(texts, add_special_tokens=add_special_tokens)]


def tokenize_and_fit(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    item_spans: Sequence[Sequence[Sequence[int]]] | None,
    limit: int | None,
    truncate: str | None,
    chunk_size: int = TOKENIZE_CHUNK,
    add_special_tokens: bool = True,
) -> list[TokenizedPrompt]:
    """`fit_to_length(tokenize_prompts(...), limit, truncate)` in bounded memory; the same prompts.

    Lengths are checked chunk by chunk. A too-long prompt is truncated at
    once when `truncate` is set (only its kept tokens stay); without
    `truncate`, the first too-long prompt drops everything kept so far and the
    remaining prompts are only counted (no offsets, no token lists), so an
    impossible task is refused (`PromptsTooLongError`) in the memory of one
    chunk, however many prompts it has.
    """
    if truncate is not None and truncate not in TRUNCATION_POLICIES:
        raise ValueError(f"truncate must be one of {list(TRUNCATION_POLICIES)} or None, got {truncate!r}")
    fitted: list[TokenizedPrompt] = []
    too_long, longest, rest = 0, 0, len(prompts)
    chunks = _tokenized_chunks(tokenizer, prompts, item_spans, chunk_size, special=add_special_tokens)
    for index, prompt in enumerate(chunks):
        length = len(prompt.input_ids)
        if limit is not None and length > limit:
            if truncate is None:
                too_long, longest = too_long + 1, max(longest, length)
                fitted.clear()  # refused: nothing is kept from here on
            else:
                prompt = _truncate(prompt, limit, truncate)
        if not too_long:
            fitted.append(prompt)
        elif (index + 1) % chunk_size == 0:  # the chunk of the first too-long prompt is done
            rest = index + 1
            break
    chunks.close()
    for length in token_lengths(tokenizer, prompts, chunk_size, start=rest, add_special_tokens=add_special_tokens):
        if limit is not None and length > limit:
            too_long, longest = too_long + 1, max(longest, length)
    if too_long:
        raise PromptsTooLongError(too_long, len(prompts), limit, longest)
    return fitted


def prompt_limit(model: PreTrainedModel, settings: DecodeSettings) -> int | None:
    """Longest prompt that leaves room for `max_new_tokens`, or None when the model states no length."""
    budget = settings.max_length or getattr(model.config, "max_position_embeddings", None)
    if budget is None:
        return None
    limit = budget - settings.max_new_tokens
    if limit < 1:
        raise ValueError(
            f"max_new_tokens={settings.max_new_tokens} leaves no room for a prompt in a length budget of {budget}; "
            "lower --max_new_tokens or raise --max_length"
        )
    return limit


def _truncate(prompt: TokenizedPrompt, limit: int, policy: str) -> TokenizedPrompt:
    n = len(prompt.input_ids)
    head = 0 if policy == "left" else (limit + 1) // 2
    kept = list(range(head)) + list(range(n - (limit - head), n))
    spans = tuple((bisect.bisect_left(kept, s), bisect.bisect_left(kept, e)) for s, e in prompt.item_spans)
    return TokenizedPrompt(tuple(prompt.input_ids[i] for i in kept), spans, truncated=True)


def fit_to_length(prompts: Sequence[TokenizedPrompt], limit: int | None, truncate: str | None) -> list[TokenizedPrompt]:
    """Prompts within `limit` tokens: unchanged, truncated by the chosen policy, or a clear error. Never silent.

    For prompts still to be tokenised, `tokenize_and_fit` does the same in bounded memory.
    """
    if limit is None:
        return list(prompts)
    too_long = [len(p.input_ids) for p in prompts if len(p.input_ids) > limit]
    if too_long and truncate is None:
        raise PromptsTooLongError(len(too_long), len(prompts), limit, max(too_long))
    return [_truncate(p, limit, truncate) if len(p.input_ids) > limit else p for p in prompts]


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (an out-of-memory shows at once)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def batch_cost(lengths: Sequence[int], batch: Sequence[int], max_new_tokens: int) -> int:
    """Tokens a batch processes, padding included: rows × (longest prompt + new tokens), the unit that
    `repo_common.distributed.balanced_shares` balances across ranks (prefill dominates long prompts)."""
    return len(batch) * (max(lengths[i] for i in batch) + max_new_tokens)


def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str] | Sequence[TokenizedPrompt],
    settings: DecodeSettings | None = None,
    methods: MethodStack | None = None,
    item_spans: Sequence[Sequence[Sequence[int]]] | None = None,
    progress: bool = False,
) -> list[Generation]:
    """Greedy outputs for `prompts` (strings or pre-tokenized), in the given order."""
    settings = settings or DecodeSettings()
    limit = prompt_limit(model, settings)
    if prompts and isinstance(prompts[0], str):
        fitted = tokenize_and_fit(tokenizer, prompts, item_spans, limit, settings.truncate)
    else:
        fitted = fit_to_length(prompts, limit, settings.truncate)
    results: list[Generation | None] = [None] * len(fitted)
    plan = plan_batches([len(p.input_ids) for p in fitted], settings.batch_size)
    for indices in tqdm(plan, desc="generate", unit="batch", disable=not progress):
        batch = collate([fitted[i] for i in indices], tokenizer.pad_token_id, model.device)
        for index, output in zip(indices, generate_batch(model, tokenizer, batch, settings, methods)):
            results[index] = output
    return results  # type: ignore[return-value]
