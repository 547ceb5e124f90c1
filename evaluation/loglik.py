"""Log-likelihood of continuations given a context: how multiple-choice tasks are scored (no generation).

`loglikelihood(model, tokenizer, context, options)` returns, per option,
Σ_j log p(option token j | context, option tokens < j). All options of one
question go through the model as one batch:

- `use_cache=False`: one forward over the right-padded batch `context + option_i`;
- `use_cache=True`: one forward over the context, its KV cache repeated per
  option, then one forward over the padded options (the context is encoded
  once, which pays off when it is long and the options are many).

Both give the same numbers up to float rounding (a test checks it, and checks
both against a manual sum of log-softmax).

`token_continuation_scores(model, prompts, continuations, pad_id)` does the
same for prompts already tokenised as the harness feeds them (chat-templated,
truncated): the LPES search's `gold_loglik` score.

Tokenisation follows lm-evaluation-harness: trailing whitespace of the context
moves to the front of each option (so " Paris" is scored as one word), the
context is encoded with special tokens (BOS when the tokenizer adds one) and
each option without. An empty context is replaced by the BOS (else EOS) token,
so that the first option token has something to be predicted from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from evaluation.methods.decoding import TokenizedPrompt, collate
from evaluation.token_ids import TokenIds
from repo_train.modeling.cache_keyword import cache_argument


def encode_pair(tokenizer, context: str, continuations: Sequence[str]) -> tuple[list[int], list[list[int]]]:
    """Token ids of the context and of each continuation (lm-eval's whitespace rule)."""
    if isinstance(continuations, str) or not continuations:
        raise ValueError(f"continuations must be a non-empty list of strings, got {continuations!r}")
    stripped = context.rstrip()
    moved = context[len(stripped) :]
    context_ids = list(tokenizer(stripped, add_special_tokens=True)["input_ids"])
    if not context_ids:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if start is None:
            raise ValueError("empty context and a tokenizer without BOS/EOS: give the options a context to follow")
        context_ids = [start]
    options = []
    for text in continuations:
        ids = list(tokenizer(moved + text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"continuation {text!r} has no tokens; every option needs at least one token")
        options.append(ids)
    return context_ids, options


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and their mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def pad_token_id(model, tokenizer) -> int:
    """The id that pads a batch (any id does under the attention mask; the first one the model or tokenizer names)."""
    for candidate in (tokenizer.pad_token_id, model.generation_config.pad_token_id, tokenizer.eos_token_id, 0):
        if candidate is not None:
            return int(candidate)
    return 0


@torch.no_grad()
def continuation_scores(
    model, tokenizer, context: str, continuations: Sequence[str], use_cache: bool = False
) -> list[tuple[float, int]]:
    """(sum of log-probabilities, number of tokens) of each continuation after `context`."""
    context_ids, options = encode_pair(tokenizer, context, continuations)
    device, n_ctx = model.device, len(context_ids)
    pad = pad_token_id(model, tokenizer)
    if not use_cache:
        ids, mask = _pad([context_ids + o for o in options], pad)
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        logits = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), use_cache=False
        )
        logprobs = torch.log_softmax(logits.logits.float(), dim=-1)
        out = []
        for row, option in enumerate(options):
            steps = torch.arange(n_ctx - 1, n_ctx - 1 + len(option), device=device)
            out.append((float(logprobs[row, steps, torch.tensor(option, device=device)].sum()), len(option)))
        return out
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    prefix = torch.tensor([context_ids], device=device)
    first = model(
        input_ids=prefix, position_ids=torch.arange(n_ctx, device=device)[None], use_cache=True, **cache_argument(cache)
    )
    first_logprobs = torch.log_softmax(first.logits[0, -1].float(), dim=-1)
    cache.batch_repeat_interleave(len(options))
    ids, mask = _pad(options, pad)
    full_mask = torch.cat([torch.ones(len(options), n_ctx, dtype=torch.long), mask], dim=1)
    positions = (n_ctx + torch.arange(ids.shape[1])).expand_as(ids)
    rest = model(
        input_ids=ids.to(device),
        attention_mask=full_mask.to(device),
        position_ids=positions.to(device),
        **cache_argument(cache),
        use_cache=True,
    )
    logprobs = torch.log_softmax(rest.logits.float(), dim=-1)
    out = []
    for row, option in enumerate(options):
        total = first_logprobs[option[0]]
        if len(option) > 1:
            steps = torch.arange(len(option) - 1, device=device)
            total = total + logprobs[row, steps, torch.tensor(option[1:], device=device)].sum()
        out.append((float(total), len(option)))
    return out


@torch.no_grad()
def token_continuation_scores(
    model, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]], pad_id: int
) -> list[tuple[float, int]]:
    """(sum of log-probabilities, number of tokens) of each continuation's ids right after its prompt's ids.

    For prompts already tokenised (chat-templated, truncated) as the harness feeds them: one forward over the
    left-padded batch `prompt_i + continuation_i`, positions as HF computes them under left padding (the
    harness's `collate`), and only the last max|continuation| + 1 positions' logits kept (a long prompt's
    full [B, T, V] logits would not fit a large vocabulary in memory).
    """
    if len(prompts) != len(continuations) or not prompts:
        raise ValueError(f"need one continuation per prompt, got {len(prompts)} prompts, {len(continuations)}")
    if any(not c for c in continuations) or any(not p for p in prompts):
        raise ValueError("every prompt and every continuation needs at least one token")
    joined = [TokenizedPrompt(TokenIds(p) + c) for p, c in zip(prompts, continuations)]
    batch = collate(joined, pad_id, model.device)
    keep = max(len(c) for c in continuations) + 1
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=keep,
    )
    logprobs = torch.log_softmax(out.logits[:, -keep:].float(), dim=-1)
    scores = []
    for row, option in enumerate(continuations):
        steps = torch.arange(keep - 1 - len(option), keep - 1, device=logprobs.device)
        targets = torch.tensor(list(option), device=logprobs.device)
        scores.append((float(logprobs[row, steps, targets].sum()), len(option)))
    return scores


def loglikelihood(model, tokenizer, context: str, continuations: Sequence[str], use_cache: bool = False) -> list[float]:
    """Σ log p of each continuation's tokens after `context`, one batched forward per option set."""
    return [total for total, _ in continuation_scores(model, tokenizer, context, continuations, use_cache)]
