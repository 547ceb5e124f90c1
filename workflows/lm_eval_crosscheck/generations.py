"""The `--score metric` check: the same token ids, then every continuation compared exactly and every mismatch
explained (whitespace, stop-string cutting or EOS handling, or diverging tokens and their greedy margin)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from evaluation.methods.decoding import DecodeSettings, Generation, collate, generate_batch
from evaluation.runner import PreparedTask
from workflows.lm_eval_crosscheck.ours import length_budget, prompt_texts, run_ours
from workflows.lm_eval_crosscheck.peer import peer, recording, run_peer
from workflows.lm_eval_crosscheck.timing import run_record, timed_rounds


def describe_difference(ours: Sequence[int], theirs: Sequence[int], tokenizer) -> str:
    """What lm-eval's token ids of a prompt add or drop relative to ours, in words."""
    ours, theirs = list(ours), list(theirs)
    special = set(tokenizer.all_special_ids)
    for name, a, b in (("adds", theirs, ours), ("drops", ours, theirs)):
        for cut in range(1, 4):
            if a[cut:] == b:
                return f"lm-eval {name} {tokenizer.convert_ids_to_tokens(a[:cut])} at the start"
            if a[:-cut] == b:
                return f"lm-eval {name} {tokenizer.convert_ids_to_tokens(a[-cut:])} at the end"
    first = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    kind = "special" if {*ours[first : first + 1], *theirs[first : first + 1]} & special else "ordinary"
    return f"first difference at token {first} ({kind} token; {len(ours)} ids here, {len(theirs)} in lm-eval)"


def tokenization_differences(lm, tokenizer, texts: Sequence[str], prepared: PreparedTask) -> list[dict[str, Any]]:
    """Prompts whose lm-eval token ids (`HFLM.tok_batch_encode`, alone) differ from the harness's."""
    differences = []
    for index, text in enumerate(texts):
        ids, _ = lm.tok_batch_encode([text])
        theirs, ours = ids[0].tolist(), list(prepared.prompts[index].input_ids)
        if theirs != ours:
            differences.append(
                {
                    "index": index,
                    "id": prepared.rows[index]["id"],
                    "difference": describe_difference(ours, theirs, tokenizer),
                }
            )
    return differences


def peer_batches(calls: Sequence[dict[str, torch.Tensor]], prepared: PreparedTask, eos: set[int]) -> dict[str, Any]:
    """What lm-eval's batches fed the model and generated, mapped back to our prompts.

    Returns the batches (prompt indices), whether every unpadded input row equals our ids for that prompt,
    the decode steps each batch ran, and per prompt the generated ids up to (not including) EOS.
    """
    by_ids: dict[tuple[int, ...], list[int]] = {}
    for index, prompt in enumerate(prepared.prompts):
        by_ids.setdefault(tuple(prompt.input_ids), []).append(index)
    batches, steps, generated, unmatched = [], [], {}, 0
    for call in calls:
        width = call["input_ids"].shape[1]
        steps.append(call["output"].shape[1] - width)
        batch = []
        for row in range(call["input_ids"].shape[0]):
            ids = tuple(call["input_ids"][row][call["attention_mask"][row].bool()].tolist())
            candidates = by_ids.get(ids)
            if not candidates:
                unmatched += 1
                continue
            index = candidates.pop(0)
            batch.append(index)
            new = call["output"][row, width:].tolist()
            generated[index] = new[: next((i for i, t in enumerate(new) if t in eos), len(new))]
        batches.append(batch)
    return {
        "batches": batches,
        "inputs_identical": unmatched == 0 and len(generated) == len(prepared.prompts),
        "steps": steps,
        "generated": generated,
    }


def our_steps(prepared: PreparedTask, outputs: Sequence[Generation]) -> list[int]:
    """Decode steps each of our batches ran: its longest row (an EOS counts, though the text drops it)."""
    return [
        max(len(outputs[i].token_ids) + (outputs[i].stop_reason == "eos") for i in batch) for batch in prepared.plan
    ]


def greedy_margin(model, prompt_ids: Sequence[int], prefix: Sequence[int], tokenizer) -> dict[str, Any]:
    """The two best next tokens after prompt + prefix (one row, no padding) and their logit gap."""
    import torch  # lazy: --help answers without torch

    ids = torch.tensor([[*prompt_ids, *prefix]], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
    top = torch.topk(logits, 2)
    first, second = top.indices.tolist()
    return {
        "top2": tokenizer.convert_ids_to_tokens([first, second]),
        "top2_ids": [first, second],
        "gap": float(top.values[0] - top.values[1]),
    }


def explain(
    index: int,
    model,
    tokenizer,
    prepared: PreparedTask,
    texts: Sequence[str],
    ours: Generation,
    theirs: str,
    theirs_ids: Sequence[int] | None,
    add_special_tokens: bool,
) -> dict[str, Any]:
    """Why our continuation of prompt `index` is not lm-eval's: the evidence and a one-line reason."""
    row = prepared.rows[index]
    found: dict[str, Any] = {
        "index": index,
        "id": row["id"],
        "ours": ours.text,
        "lm_eval": theirs,
        "our_stop_reason": ours.stop_reason,
    }
    if ours.text.split() == theirs.split():
        found["reason"] = "whitespace only: the same words, spaced or cut differently at the ends"
        return found
    if theirs_ids is None:
        found["reason"] = "lm-eval's tokens for this prompt were not recorded"
        return found
    ours_ids = list(ours.token_ids)
    diverge = next((i for i, (a, b) in enumerate(zip(ours_ids, theirs_ids)) if a != b), None)
    if diverge is None:
        found["reason"] = (
            f"the same tokens, cut differently: ours stopped after {len(ours_ids)} tokens ({ours.stop_reason}), "
            f"lm-eval ran {len(theirs_ids)} before EOS or its batch's end (stop-string cutting / EOS handling)"
        )
        return found
    prompt_ids = prepared.prompts[index].input_ids
    margin = greedy_margin(model, prompt_ids, ours_ids[:diverge], tokenizer)
    settings = DecodeSettings(
        max_new_tokens=prepared.settings.max_new_tokens, stop_strings=prepared.settings.stop_strings, batch_size=1
    )
    alone_ours = generate_batch(
        model, tokenizer, collate([prepared.prompts[index]], tokenizer.pad_token_id, model.device), settings
    )[0].text
    single = peer(model, tokenizer, 1, add_special_tokens, length_budget(model, prepared.settings))
    alone_theirs = run_peer(single, [texts[index]], settings)[1][0]
    found.update(
        {
            "diverging_step": diverge,
            "ours_token": tokenizer.convert_ids_to_tokens(ours_ids[diverge]),
            "lm_eval_token": tokenizer.convert_ids_to_tokens(theirs_ids[diverge]),
            "margin_alone": margin,
            "alone": {"ours": alone_ours, "lm_eval": alone_theirs},
        }
    )
    if alone_ours == alone_theirs:
        found["reason"] = (
            f"batch numerics: alone (batch 1, no padding) both give the same text; in their batches the tokens "
            f"part at step {diverge}, where the two best tokens are {margin['gap']:.4f} logits apart"
        )
    else:
        found["reason"] = f"the two differ even alone: tokens part at step {diverge} (gap {margin['gap']:.4f})"
    return found


def compare(
    model,
    tokenizer,
    prepared: PreparedTask,
    texts: Sequence[str],
    ours: Sequence[Generation],
    theirs: Sequence[str],
    generated: dict[int, list[int]],
    add_special_tokens: bool,
) -> dict[str, Any]:
    """Exact match of every continuation; every mismatch explained."""
    matches = [o.text == t for o, t in zip(ours, theirs, strict=True)]
    mismatches = [
        explain(i, model, tokenizer, prepared, texts, ours[i], theirs[i], generated.get(i), add_special_tokens)
        for i, same in enumerate(matches)
        if not same
    ]
    return {
        "matches": sum(matches),
        "total": len(matches),
        "rate": sum(matches) / len(matches),
        "mismatches": mismatches,
    }


def crosscheck(model, tokenizer, prepared: PreparedTask, repeats: int = 0, log=print) -> dict[str, Any]:
    """The token check, one untimed pair (compared), then `repeats` timed alternating rounds; the report."""
    texts, special = prompt_texts(prepared)
    settings = prepared.settings
    budget = length_budget(model, settings)
    lm = peer(model, tokenizer, settings.batch_size, special, budget)
    start = time.perf_counter()
    token_diffs = tokenization_differences(lm, tokenizer, texts, prepared)
    tokenize_seconds = time.perf_counter() - start
    log(
        f"token ids: {'identical' if not token_diffs else f'{len(token_diffs)} prompts differ'} "
        f"({len(texts)} prompts, lm-eval add_bos_token={special})"
    )
    for diff in token_diffs[:5]:
        log(f"  {diff['id']}: {diff['difference']}")

    seconds_ours, ours = run_ours(model, tokenizer, prepared)
    with recording(lm) as calls:
        seconds_theirs, theirs = run_peer(lm, texts, settings)
    eos = {int(tokenizer.eos_token_id)} | _generation_eos(model)
    fed = peer_batches(calls, prepared, eos)
    result = compare(model, tokenizer, prepared, texts, ours, theirs, fed["generated"], special)
    log(
        f"continuations: {result['matches']}/{result['total']} identical (match rate {result['rate']:.3f}); "
        f"untimed pair: ours {seconds_ours:.2f}s, lm-eval {seconds_theirs:.2f}s"
    )
    for miss in result["mismatches"]:
        log(f"  {miss['id']}: ours {miss['ours']!r} vs lm-eval {miss['lm_eval']!r}: {miss['reason']}")

    timing = timed_rounds(
        lambda: run_ours(model, tokenizer, prepared),
        lambda: run_peer(lm, texts, settings),
        ([o.text for o in ours], theirs),
        lambda out: [o.text for o in out],
        repeats,
        log,
    )

    lengths = [len(p.input_ids) for p in prepared.prompts]
    ours_steps = our_steps(prepared, ours)
    return {
        "tokenization": {
            "identical": not token_diffs,
            "differences": token_diffs,
            "lm_eval_add_bos_token": special,
            "lm_eval_batches_fed_identical_ids": fed["inputs_identical"],
            "lm_eval_tokenize_seconds_all_prompts": tokenize_seconds,
        },
        "batches": {
            "ours": prepared.plan,
            "lm_eval": fed["batches"],
            "same_composition": sorted(map(sorted, prepared.plan)) == sorted(map(sorted, fed["batches"])),
            "decode_steps_ours": ours_steps,
            "decode_steps_lm_eval": fed["steps"],
        },
        "match": result,
        **run_record(prepared, seconds_ours, seconds_theirs, timing),
        "outputs": [
            {
                "id": row["id"],
                "gold_position": row["gold_position"],
                "prompt_tokens": length,
                "ours": o.text,
                "lm_eval": t,
                "our_stop_reason": o.stop_reason,
                "match": o.text == t,
            }
            for row, length, o, t in zip(prepared.rows, lengths, ours, theirs)
        ],
    }


def _generation_eos(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}
