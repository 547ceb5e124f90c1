"""Teacher forcing through the decode loop (`score_continuations`): the gold answer's log-probability under each
method, checked against one plain forward and against the method's own greedy choices."""

from __future__ import annotations

import pytest
import torch
from float_checks import assert_close_to_scale
from method_helpers import PROMPTS, batch_of, tokens

from evaluation.generation import DecodeSettings, generate_batch, tokenize_prompts
from evaluation.loglik import pad_token_id, token_continuation_scores
from evaluation.methods import MethodStack
from evaluation.methods.decoding import score_continuations

CONTINUATIONS = [" Paris", " a much longer answer", "x"]


def ids_of(tokenizer, texts):
    return [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def forced(model, tokenizer, spec, continuations, prompts=PROMPTS):
    stack = MethodStack.parse(spec)
    with stack.attached(model, tokenizer):
        return score_continuations(model, tokenizer, batch_of(tokenizer, prompts), continuations, stack)


@pytest.mark.parametrize("spec", ["baseline", "pi:scale=2"])
def test_policy_methods_equal_one_forward_over_prompt_and_continuation(tiny_lm, spec):
    """Methods acting through position policies: the loop (prefill, then one token a step through the cache)
    gives what one forward over prompt + continuation gives with the same policies installed."""
    model, tokenizer = tiny_lm
    continuations = ids_of(tokenizer, CONTINUATIONS)
    scores = forced(model, tokenizer, spec, continuations)
    prompts = [p.input_ids for p in tokenize_prompts(tokenizer, PROMPTS)]
    stack = MethodStack.parse(spec)
    with stack.attached(model, tokenizer):
        reference = token_continuation_scores(model, prompts, continuations, pad_token_id(model, tokenizer))
    assert [s.tokens for s in scores] == [n for _, n in reference] == [len(c) for c in continuations]
    # the cache path against one forward: float32 drift of a few ulps of the summed log-probabilities
    assert_close_to_scale([s.logprob_sum for s in scores], [total for total, _ in reference], 1e-4, what=spec)
    assert all(s.mean_logprob < 0 for s in scores)
    assert [s.prompt_tokens for s in scores] == [len(p) for p in prompts]


@pytest.mark.parametrize(
    ("spec", "any_token"),  # any_token: every token keeps a probability (pcd's default keeps its top 30 only)
    [("baseline", True), ("pcd", False), ("pcd:gamma=100000", True), ("attention_buckets", True),
     ("pi:scale=2+pcd", False)],
)  # fmt: skip
def test_forcing_the_methods_own_greedy_answer_matches_every_argmax(tiny_lm, spec, any_token):
    """Forcing what greedy decoding chose under a method: every step's argmax is the forced token (the loop
    reads the same logits greedy decoding does, contrast and bucket combination included)."""
    model, tokenizer = tiny_lm
    stack = MethodStack.parse(spec)
    settings = DecodeSettings(max_new_tokens=5, batch_size=3)
    with stack.attached(model, tokenizer):
        greedy = tokens(generate_batch(model, tokenizer, batch_of(tokenizer), settings, stack))
    assert all(greedy), "every row generated at least one token"
    scores = forced(model, tokenizer, spec, greedy)
    assert all(s.greedy_match for s in scores)
    if not any_token:
        return
    # a first token greedy did not choose: no longer a match, and a lower log-probability for that token
    other = [[(row[0] + 1) % len(tokenizer)] for row in greedy]
    changed = forced(model, tokenizer, spec, other)
    first = forced(model, tokenizer, spec, [row[:1] for row in greedy])
    assert not any(s.greedy_match for s in changed)
    assert all(c.logprob_sum < f.logprob_sum for c, f in zip(changed, first))


def test_a_method_changes_the_score(tiny_lm):
    model, tokenizer = tiny_lm
    continuations = ids_of(tokenizer, CONTINUATIONS)
    base = forced(model, tokenizer, "baseline", continuations)
    scaled = forced(model, tokenizer, "pi:scale=4", continuations)
    assert max(abs(a.logprob_sum - b.logprob_sum) for a, b in zip(base, scaled)) > 1e-3


def test_batched_rows_of_attention_buckets_score_as_the_sequential_passes(tiny_lm):
    model, tokenizer = tiny_lm
    continuations = ids_of(tokenizer, CONTINUATIONS)
    batched = forced(model, tokenizer, "attention_buckets", continuations)
    sequential = forced(model, tokenizer, "attention_buckets:passes=sequential", continuations)
    assert_close_to_scale([s.logprob_sum for s in batched], [s.logprob_sum for s in sequential], 1e-4)


def test_pcd_top_gamma_gives_a_token_outside_probability_zero_refused(tiny_lm):
    """PCD keeps only its top-γ tokens: a gold token outside them has no log-likelihood; the error says what to do.
    With γ at the vocabulary size the contrast covers every token and the score is finite."""
    model, tokenizer = tiny_lm
    with torch.no_grad():
        logits = model(**tokenizer(PROMPTS[1:2], return_tensors="pt")).logits[0, -1]
    unlikely = int(logits.argmin())  # last of the vocabulary: outside the top 30
    with pytest.raises(ValueError, match="probability 0 .* score it by the task's metric"):
        forced(model, tokenizer, "pcd", [[unlikely]], prompts=PROMPTS[1:2])
    (score,) = forced(model, tokenizer, f"pcd:gamma={len(tokenizer)}", [[unlikely]], prompts=PROMPTS[1:2])
    assert score.logprob_sum < 0 and score.logprob_sum > -float("inf") and not score.greedy_match


def test_bad_continuations_are_refused(tiny_lm):
    model, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="one non-empty continuation per row"):
        forced(model, tokenizer, "baseline", [[5], [], [6]])
    with pytest.raises(ValueError, match="one non-empty continuation per row"):
        forced(model, tokenizer, "baseline", [[5]])
