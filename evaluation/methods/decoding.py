"""Greedy decoding of one left-padded batch with a method stack: the loop the methods plug into.

Why not `model.generate`: calibration methods need to act between the steps
(positions of the prompt tokens before the prefill, logits of every step, a
second forward with its own cache), which `generate` hides. The loop below
makes the same calls `generate(do_sample=False)` makes (left padding,
positions = cumsum(mask) - 1, a `DynamicCache`, one token a step, finished rows
fed the pad token, an all-ones mask dropped), so on the baseline it gives the
same tokens; the tests check that token for token. Its cache's layers append
each step in place (`kv_cache.ReservedLayer`) where HF's copy the whole cache. Methods that decode copies
of the batch under other position policies (Attention Buckets, PCD) get them
as extra rows of this loop's forward (`row_groups`).

It lives in this package, next to the `Method` interface (`base`) and the row
groups it drives, because some methods run it themselves (PCD's salience,
Found-in-the-Middle's calibration prefill): `evaluation.generation`, which
tokenises, fits and batches a whole task, imports it from here, never the reverse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from evaluation.methods.base import GenerationBatch, GenerationState, MethodStack
from evaluation.methods.kv_cache import reserved_cache
from evaluation.methods.row_groups import RowGroups
from evaluation.run_config import DecodeSettings
from evaluation.token_ids import TokenIds
from repo_train.modeling.cache_keyword import cache_argument


@dataclass(frozen=True)
class TokenizedPrompt:
    """A prompt as token ids, with the [start, end) token span of each task item (unpadded coordinates).

    `input_ids` may be given as any sequence of ints; it is kept packed (`TokenIds`, 4 bytes a token), since a
    run holds every prompt of a task in memory.
    """

    input_ids: TokenIds
    item_spans: tuple[tuple[int, int], ...] = ()
    truncated: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.input_ids, TokenIds):
            object.__setattr__(self, "input_ids", TokenIds(self.input_ids))


@dataclass
class Generation:
    """One prompt's output: the text (cut at a stop string), the generated ids and why it stopped."""

    text: str
    token_ids: list[int]
    prompt_tokens: int
    truncated: bool
    stop_reason: str = "length"
    """'eos', 'stop' (a stop string) or 'length' (max_new_tokens reached)."""


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
        input_ids[row, pad:] = prompt.input_ids.as_tensor()
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
    cache = reserved_cache(model, reserve=settings.max_new_tokens)  # each step written in place, no copy
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
