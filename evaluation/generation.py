"""Batched greedy generation with an explicit prefill + decode loop over a KV cache.

Why not `model.generate`: calibration methods need to act between the steps
(positions of the prompt tokens before the prefill, logits of every step, a
second forward with its own cache), which `generate` hides. The loop below
makes the same calls `generate(do_sample=False)` makes (left padding,
positions = cumsum(mask) - 1, a `DynamicCache`, one token a step, finished rows
fed the pad token, an all-ones mask dropped), so on the baseline it gives the
same tokens; the tests check that token for token. Methods that decode copies
of the batch under other position policies (Attention Buckets, PCD) get them
as extra rows of this loop's forward (`evaluation.methods.row_groups`).

Pipeline: `tokenize_prompts` (token ids + each item's token span, from the
tokenizer's offset mapping) -> `fit_to_length` (length check, or an explicit
truncation) -> `plan_batches` (by length) -> `collate` -> `generate_batch`.
`generate` chains them for a list of strings. `tokenize_and_fit` is the first
two in bounded memory (chunks of `TOKENIZE_CHUNK` prompts, lengths checked as
it goes, a refusal counts the rest by length only), for the harness's tasks of
tens of thousands of long prompts.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from evaluation.methods.base import GenerationBatch, GenerationState, MethodStack
from evaluation.methods.row_groups import RowGroups
from repo_train.modeling.cache_keyword import cache_argument

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


@dataclass(frozen=True)
class TokenizedPrompt:
    """A prompt as token ids, with the [start, end) token span of each task item (unpadded coordinates)."""

    input_ids: tuple[int, ...]
    item_spans: tuple[tuple[int, int], ...] = ()
    truncated: bool = False


@dataclass
class Generation:
    """One prompt's output: the text (cut at a stop string), the generated ids and why it stopped."""

    text: str
    token_ids: list[int]
    prompt_tokens: int
    truncated: bool
    stop_reason: str = "length"
    """'eos', 'stop' (a stop string) or 'length' (max_new_tokens reached)."""


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
            "limit is --max-length, else the model's max_position_embeddings, minus --max-new-tokens); raise "
            "--max-length, use fewer items per prompt (--num-keys / --num-documents), or pass --truncate middle|left"
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
                yield TokenizedPrompt(tuple(ids), spans)
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
            "lower --max-new-tokens or raise --max-length"
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


def collate(
    prompts: Sequence[TokenizedPrompt],
    pad_token_id: int,
    device: torch.device | str = "cpu",
    rows: Sequence[dict[str, Any]] | None = None,
) -> GenerationBatch:
    """Left-pad prompts into one batch; item spans shift by each row's padding; positions as HF computes them.

    `rows` (per-row metadata such as the row id) ride along for methods that want them.
    """
    width = max(len(p.input_ids) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    spans = []
    for row, prompt in enumerate(prompts):
        pad = width - len(prompt.input_ids)
        input_ids[row, pad:] = torch.tensor(prompt.input_ids, dtype=torch.long)
        attention_mask[row, pad:] = 1
        spans.append([(s + pad, e + pad) for s, e in prompt.item_spans])
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    return GenerationBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        item_token_spans=spans,
        pad_lengths=[width - len(p.input_ids) for p in prompts],
        truncated=[p.truncated for p in prompts],
        rows=list(rows) if rows is not None else [{} for _ in prompts],
    )


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The ids that end a row: the generation config's (what `generate` uses), else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


def _next_positions(position_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Per row, 1 + the largest prefill position of a real token (HF's `last + 1` for default positions)."""
    floor = torch.finfo(position_ids.dtype).min if position_ids.is_floating_point() else torch.iinfo(torch.long).min
    return position_ids.masked_fill(attention_mask == 0, floor).amax(dim=1) + 1


def cut_at_stop(text: str, stop_strings: Sequence[str]) -> tuple[str, bool]:
    """`text` before the earliest stop string, and whether one occurred."""
    hits = [text.find(s) for s in stop_strings if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


@torch.no_grad()
def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    batch: GenerationBatch,
    settings: DecodeSettings,
    methods: MethodStack | None = None,
) -> list[Generation]:
    """Greedy decoding of one left-padded batch: prefill, then one token a step through the cache.

    Methods see the batch before the prefill (`prefill_position_ids`) and the
    float32 logits of every step (`process_logits`, step 0 = end of prefill).
    """
    methods = methods or MethodStack([])
    batch = dataclasses.replace(batch)  # methods may replace position_ids; the caller's batch stays as it was
    state = GenerationState(model=model, tokenizer=tokenizer, batch=batch)
    methods.start(state)
    try:
        lengths, reasons = _decode_loop(model, tokenizer, settings, methods, state)
    finally:
        methods.finish(state)
    outputs = []
    for row, (length, reason) in enumerate(zip(lengths, reasons)):
        ids = state.generated[row, :length].tolist()
        if reason == "eos":
            ids = ids[:-1]
        text, _ = cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), settings.stop_strings)
        outputs.append(Generation(text, ids, int(batch.attention_mask[row].sum()), batch.truncated[row], reason))
    return outputs


def _decode_loop(model, tokenizer, settings: DecodeSettings, methods: MethodStack, state: GenerationState):
    """The prefill + decode loop; returns per row the number of tokens it generated and why it stopped."""
    batch = state.batch
    eos = eos_token_ids(model, tokenizer)
    pad_id = model.generation_config.pad_token_id
    pad_id = tokenizer.pad_token_id if pad_id is None else pad_id
    positions = methods.prefill_position_ids(batch)
    mask = batch.attention_mask
    drop_mask = bool((mask == 1).all())  # as `generate` does: an all-ones mask adds nothing
    rows = batch.input_ids.shape[0]
    groups = RowGroups.of(methods, model, rows)  # copies of the batch some method decodes in this forward
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    next_pos = _next_positions(positions, mask)
    inputs, step_positions = batch.input_ids, positions
    unfinished = torch.ones(rows, dtype=torch.bool, device=mask.device)
    lengths, reasons = [settings.max_new_tokens] * rows, ["length"] * rows
    generated: list[torch.Tensor] = []
    for step in range(settings.max_new_tokens):
        logits, state.group_logits = _forward(
            model, groups, inputs, None if drop_mask else mask, step_positions, cache, step
        )
        state.observe(step, inputs, step_positions, mask, cache, ~unfinished)
        logits = methods.process_logits(step, logits, state)
        tokens = torch.where(unfinished, logits.argmax(dim=-1), pad_id)
        generated.append(tokens)
        state.generated = torch.stack(generated, dim=1)
        for row in torch.nonzero(unfinished).flatten().tolist():
            reason = None
            if int(tokens[row]) in eos:
                reason = "eos"
            elif settings.stop_strings:
                text = tokenizer.decode(state.generated[row], skip_special_tokens=True)
                reason = "stop" if cut_at_stop(text, settings.stop_strings)[1] else None
            if reason is not None:
                unfinished[row], lengths[row], reasons[row] = False, step + 1, reason
        if not unfinished.any() or step == settings.max_new_tokens - 1:
            break
        inputs = tokens[:, None]
        step_positions = (next_pos + step)[:, None]
        mask = torch.cat([mask, mask.new_ones(rows, 1)], dim=1)
    return lengths, reasons


def _forward(model, groups: RowGroups | None, inputs, mask, positions, cache, step: int):
    """One step's forward: the float32 last-token logits `[B, V]` and those of each method's row groups
    (their prefill group by group, their decoding steps as rows of one forward: `RowGroups`)."""

    def last_logits(inputs, mask, positions, cache) -> torch.Tensor:
        out = model(
            input_ids=inputs,
            attention_mask=mask,
            position_ids=positions,
            **cache_argument(cache),
            use_cache=True,
            logits_to_keep=1,
            return_dict=True,
        )
        return out.logits[:, -1].to(copy=True, dtype=torch.float32)

    if groups is None:
        return last_logits(inputs, mask, positions, cache), {}
    if step == 0:
        return groups.split(groups.prefill(model, lambda part: last_logits(inputs, mask, positions, part), cache))
    mask = None if mask is None else groups.expand(mask)
    with groups.installed(model):
        return groups.split(last_logits(groups.expand(inputs), mask, groups.expand(positions), cache))


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
