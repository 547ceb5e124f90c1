"""The `--score gold_loglik` check: the same token ids, the same summed log-probabilities of the gold answers
(lm-eval's own score of the context's trailing whitespace taken off) and greedy flags, then the timing."""

from __future__ import annotations

from typing import Any

from evaluation.runner import PreparedTask, gold_token_ids
from workflows.lm_eval_crosscheck.ours import gold_texts, length_budget, prompt_texts, run_ours_loglik
from workflows.lm_eval_crosscheck.peer import peer, run_peer_loglik, whitespace_scores
from workflows.lm_eval_crosscheck.timing import run_record, timed_rounds

#: Largest |ours - lm-eval| of a summed log-probability, relative to the largest |sum|, that counts as the same
#: number: the two sides run the same float32 model over other paddings and batch shapes (lm-eval right-pads
#: one forward over context + answer; ours prefills the left-padded context, then a token a step), which moves
#: the last bits only.
LOGLIK_REL_TOLERANCE = 1e-4


def crosscheck_loglik(model, tokenizer, prepared: PreparedTask, repeats: int = 0, log=print) -> dict[str, Any]:
    """`--score gold_loglik`: the same token ids, the same log-probabilities and greedy flags, then the timing."""
    texts, special = prompt_texts(prepared)
    golds = gold_texts(prepared)
    lm = peer(model, tokenizer, prepared.settings.batch_size, special, length_budget(model, prepared.settings))
    token_diffs, moved = [], []
    for index, (text, gold, row) in enumerate(zip(texts, golds, prepared.rows)):
        context, answer = lm._encode_pair(text, gold)
        ours = (list(prepared.prompts[index].input_ids), gold_token_ids(tokenizer, prepared, row))
        moved.append(len(ours[0]) - len(context))  # tokens of trailing whitespace lm-eval scores with the answer
        if list(context) + list(answer) != ours[0] + ours[1] or list(answer)[moved[-1] :] != ours[1]:
            token_diffs.append({"id": row["id"], "gold": gold, "lm_eval_answer_ids": list(answer),
                                "our_answer_ids": ours[1], "moved_tokens": moved[-1]})  # fmt: skip
    log(f"token ids: {'identical' if not token_diffs else f'{len(token_diffs)} prompts differ'} "
        f"({len(texts)} (prompt, gold answer) pairs; lm-eval scores {max(moved)} trailing whitespace token(s) of "
        "the context with the answer, taken off below)")  # fmt: skip
    seconds_ours, ours = run_ours_loglik(model, tokenizer, prepared)
    seconds_theirs, theirs = run_peer_loglik(lm, texts, golds)
    trailing = whitespace_scores(lm, texts)
    # lm-eval's score of the gold answer alone: its pair's sum less its own score of the moved whitespace
    theirs_gold = [(t[0] - (w[0] if w else 0.0), t[1] if w is None or w[1] else None) for t, w in zip(theirs, trailing)]
    sums = [o.logprob_sum for o in ours]
    scale = max(abs(x) for x in sums) or 1.0
    gaps = [abs(o.logprob_sum - t[0]) for o, t in zip(ours, theirs_gold, strict=True)]
    same = [gap <= LOGLIK_REL_TOLERANCE * scale for gap in gaps]
    greedy_same = [o.greedy_match == t[1] for o, t in zip(ours, theirs_gold)]  # None (not greedy on the newline)
    log(f"log-likelihoods: {sum(same)}/{len(same)} equal within {LOGLIK_REL_TOLERANCE:g} of the largest |sum| "
        f"({scale:.3g}); max |Δ| {max(gaps):.3g}; greedy flags {sum(greedy_same)}/{len(greedy_same)} equal; "
        f"untimed pair: ours {seconds_ours:.2f}s, lm-eval {seconds_theirs:.2f}s")  # fmt: skip
    timing = timed_rounds(
        lambda: run_ours_loglik(model, tokenizer, prepared),
        lambda: run_peer_loglik(lm, texts, golds),
        ([(o.logprob_sum, o.greedy_match) for o in ours], theirs),
        lambda out: [(o.logprob_sum, o.greedy_match) for o in out],
        repeats,
        log,
    )
    return {
        "tokenization": {"identical": not token_diffs, "differences": token_diffs, "lm_eval_add_bos_token": special},
        "match": {
            "equal": sum(same),
            "total": len(same),
            "rate": sum(same) / len(same),
            "relative_tolerance": LOGLIK_REL_TOLERANCE,
            "scale": scale,
            "max_abs_difference": max(gaps),
            "max_relative_difference": max(gaps) / scale,
            "greedy_flags_equal": sum(greedy_same),
            "whitespace_tokens_moved": max(moved),
            "whitespace_log_probability_range": [min(w[0] for w in trailing if w), max(w[0] for w in trailing if w)]
            if any(trailing)
            else None,
        },
        **run_record(prepared, seconds_ours, seconds_theirs, timing),
        "outputs": [
            {
                "id": row["id"],
                "gold_position": row["gold_position"],
                "gold": gold,
                "gold_tokens": o.tokens,
                "ours": o.logprob_sum,
                "lm_eval": t[0],
                "lm_eval_with_whitespace": full[0],
                "our_greedy": o.greedy_match,
                "lm_eval_greedy": t[1],
            }
            for row, gold, o, t, full in zip(prepared.rows, golds, ours, theirs_gold, theirs)
        ],
    }
