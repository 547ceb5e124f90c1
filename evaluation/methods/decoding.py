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
as extra rows of this loop's forward (`row_groups`). `score_continuations` runs the same loop with given
tokens in place of the argmax (teacher forcing): a continuation's log-probability under what each method
decodes from (the harness's `--score gold_loglik`).

It lives in this package, next to the `Method` interface (`base`) and the row
groups it drives, because some methods run it themselves (PCD's salience,
Found-in-the-Middle's calibration prefill): `evaluation.generation`, which
tokenises, fits and batches a whole task, imports it from here, never the reverse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from evaluation.decode_settings import DecodeSettings
from evaluation.methods.base import GenerationBatch, GenerationState, MethodStack
from evaluation.methods.kv_cache import reserved_cache
from evaluation.methods.row_groups import RowGroups
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
    with _batch_started(model, tokenizer, batch, methods) as state:
        lengths, reasons = _decode_loop(model, tokenizer, settings, methods, state)
    batch = state.batch
    outputs = []
    for row, (length, reason) in enumerate(zip(lengths, reasons)):
        ids = state.generated[row, :length].tolist()
        if reason == "eos":
            ids = ids[:-1]
        text, _ = cut_at_stop(tokenizer.decode(ids, skip_special_tokens=True), settings.stop_strings)
        outputs.append(Generation(text, ids, int(batch.attention_mask[row].sum()), batch.truncated[row], reason))
    return outputs


@contextmanager
def _batch_started(
    model, tokenizer, batch: GenerationBatch, methods: MethodStack, teacher_forced: bool = False
) -> Iterator[GenerationState]:
    """The state of one batch, between the methods' `start` and `finish` (also after an error). The batch is a
    copy: methods may replace its position_ids, and the caller's stays as it was."""
    state = GenerationState(
        model=model, tokenizer=tokenizer, batch=dataclasses.replace(batch), teacher_forced=teacher_forced
    )
    methods.start(state)
    try:
        yield state
    finally:
        methods.finish(state)


class _Loop:
    """What greedy decoding and teacher forcing share: the prefill inputs the methods chose, the row groups, the
    reserved cache, and how one step's chosen tokens become the next step's inputs."""

    def __init__(self, model, methods: MethodStack, state: GenerationState, reserve: int):
        batch = state.batch
        self.model, self.methods, self.state = model, methods, state
        self.positions = methods.prefill_position_ids(batch)
        self.mask = batch.attention_mask
        self.drop_mask = bool((self.mask == 1).all())  # as `generate` does: an all-ones mask adds nothing
        self.rows = batch.input_ids.shape[0]
        self.groups = RowGroups.of(methods, model, self.rows)  # copies of the batch some method decodes here
        self.cache = reserved_cache(model, reserve=reserve)  # each step written in place, no copy
        self.next_pos = _next_positions(self.positions, self.mask)
        self.inputs, self.step_positions = batch.input_ids, self.positions
        self.chosen: list[torch.Tensor] = []

    def logits(self, step: int, finished: torch.Tensor) -> torch.Tensor:
        """This step's forward, seen by the methods (`observe`, `process_logits`): the float32 logits `[B, V]`."""
        state = self.state
        mask = None if self.drop_mask else self.mask
        logits, state.group_logits = _forward(
            self.model, self.groups, self.inputs, mask, self.step_positions, self.cache, step
        )
        state.observe(step, self.inputs, self.step_positions, self.mask, self.cache, finished)
        return self.methods.process_logits(step, logits, state)

    def choose(self, tokens: torch.Tensor) -> None:
        """Record this step's tokens `[B]` (`state.generated`)."""
        self.chosen.append(tokens)
        self.state.generated = torch.stack(self.chosen, dim=1)

    def advance(self, step: int) -> None:
        """Feed the tokens just chosen as the next step's inputs, one position on."""
        self.inputs = self.chosen[-1][:, None]
        self.step_positions = (self.next_pos + step)[:, None]
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.rows, 1)], dim=1)


def _pad_id(model, tokenizer) -> int | None:
    """The token finished rows are fed: the generation config's pad id, else the tokenizer's."""
    pad_id = model.generation_config.pad_token_id
    return tokenizer.pad_token_id if pad_id is None else pad_id


def _decode_loop(model, tokenizer, settings: DecodeSettings, methods: MethodStack, state: GenerationState):
    """The prefill + decode loop; returns per row the number of tokens it generated and why it stopped."""
    eos = eos_token_ids(model, tokenizer)
    pad_id = _pad_id(model, tokenizer)
    loop = _Loop(model, methods, state, reserve=settings.max_new_tokens)
    unfinished = torch.ones(loop.rows, dtype=torch.bool, device=loop.mask.device)
    lengths, reasons = [settings.max_new_tokens] * loop.rows, ["length"] * loop.rows
    for step in range(settings.max_new_tokens):
        logits = loop.logits(step, ~unfinished)
        tokens = torch.where(unfinished, logits.argmax(dim=-1), pad_id)
        loop.choose(tokens)
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
        loop.advance(step)
    return lengths, reasons


@dataclass(frozen=True)
class ForcedScore:
    """One prompt's given continuation, teacher-forced: Σ log p of its tokens under the logits the method stack
    chose from, their number, and whether greedy decoding would have picked every one of them."""

    logprob_sum: float
    tokens: int
    greedy_match: bool
    prompt_tokens: int
    truncated: bool

    @property
    def mean_logprob(self) -> float:
        """Mean log-probability per token (the `gold_loglik` score)."""
        return self.logprob_sum / self.tokens


@torch.no_grad()
def score_continuations(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    batch: GenerationBatch,
    continuations: Sequence[Sequence[int]],
    methods: MethodStack | None = None,
) -> list[ForcedScore]:
    """Teacher forcing through the decode loop: each row's continuation is fed token by token, and each token's
    log-probability read from the float32 logits after the methods' `process_logits`, the logits greedy
    decoding takes its argmax of.

    Every method acts as it does when generating (prefill positions, row groups, a second forward, a contrast of
    logits), so a method's score measures the distribution it decodes from. With no method it equals one
    forward over prompt + continuation (`evaluation.loglik.token_continuation_scores`; a test checks it).
    A token a method gives probability 0 (PCD outside its top-γ tokens) would score -inf: refused here. (The
    harness refuses PCD under `--score gold_loglik` before this: `Method.forced_scoring_problem`.)
    """
    if len(continuations) != batch.input_ids.shape[0] or any(len(c) == 0 for c in continuations):
        raise ValueError(
            f"need one non-empty continuation per row: {batch.input_ids.shape[0]} rows, lengths "
            f"{[len(c) for c in continuations]}"
        )
    methods = methods or MethodStack([])
    with _batch_started(model, tokenizer, batch, methods, teacher_forced=True) as state:
        sums, matches = _forced_loop(model, tokenizer, methods, state, continuations)
    return [
        ForcedScore(float(total), len(cont), bool(match), int(batch.attention_mask[row].sum()), batch.truncated[row])
        for row, (total, match, cont) in enumerate(zip(sums.tolist(), matches.tolist(), continuations))
    ]


def _forced_loop(model, tokenizer, methods: MethodStack, state: GenerationState, continuations):
    """The loop of `score_continuations`: per row the summed log-probability and whether every argmax matched."""
    longest = max(len(c) for c in continuations)
    loop = _Loop(model, methods, state, reserve=longest)
    device = loop.mask.device
    pad_id = _pad_id(model, tokenizer)
    targets = torch.full((loop.rows, longest), 0 if pad_id is None else pad_id, dtype=torch.long, device=device)
    for row, continuation in enumerate(continuations):
        targets[row, : len(continuation)] = torch.tensor(list(continuation), dtype=torch.long)
    lengths = torch.tensor([len(c) for c in continuations], device=device)
    sums = torch.zeros(loop.rows, dtype=torch.float64, device=device)
    matches = torch.ones(loop.rows, dtype=torch.bool, device=device)
    for step in range(longest):
        active = lengths > step
        logits = loop.logits(step, ~active)
        target = targets[:, step]
        picked = torch.log_softmax(logits, dim=-1).gather(-1, target[:, None])[:, 0]
        if bool((active & torch.isneginf(picked)).any()):
            raise ValueError(
                f"the method stack {methods.label!r} gives a continuation token probability 0 (as PCD does outside "
                "its top-gamma tokens), so its log-likelihood is -inf; score it by the task's metric"
            )
        sums += torch.where(active, picked.double(), 0.0)
        matches &= ~active | (logits.argmax(dim=-1) == target)
        loop.choose(target)
        if step < longest - 1:
            loop.advance(step)
    return sums.cpu(), matches.cpu()


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
