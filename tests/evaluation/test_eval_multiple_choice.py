"""Multiple choice by log-likelihood: formats, the log-likelihood against a manual sum, the choice rules,
and the runner's log-likelihood path (plus task-declared decoding defaults).

The fixtures under tests/fixtures/multiple_choice are written for these tests in the ARC / BoolQ line formats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from float_checks import assert_close_to_scale

from evaluation.generation import DecodeSettings
from evaluation.loglik import encode_pair, loglikelihood, pad_token_id, token_continuation_scores
from evaluation.methods import Method, MethodStack
from evaluation.results import read_records
from evaluation.runner import RunConfig, prepare_task, run, run_stack
from evaluation.tasks import build_task

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "multiple_choice"
ARC, BOOLQ = str(DATA / "arc.jsonl"), str(DATA / "boolq.jsonl")


def manual_loglik(model, context_ids, option_ids):
    """Σ log-softmax of the option tokens from one unbatched forward over context + option."""
    ids = torch.tensor([context_ids + option_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    return sum(float(logprobs[len(context_ids) - 1 + j, t]) for j, t in enumerate(option_ids))


def test_arc_and_boolq_rows():
    arc = build_task("multiple_choice", path=ARC).build()
    assert arc[0]["prompt"] == "Question: Which object is most likely to float on water?\nAnswer:"
    assert arc[0]["choices"] == [" a stone", " a dry leaf", " an iron nail", " a glass marble"]
    assert [r["gold_position"] for r in arc] == [1, 0, 3] and arc["num_positions"] == [4, 3, 4]
    assert arc[1]["answers"] == [" energy"] and arc[1]["choice_labels"] == ["1", "2", "3"]
    boolq = build_task("multiple_choice", path=BOOLQ).build()
    assert boolq[0]["prompt"] == (
        "Portcove is a small harbour town on the southern coast, known for its lanterns.\n"
        "Question: is the harbour town on the coast?\nAnswer:"
    )
    assert boolq["choices"] == [[" no", " yes"]] * 2 and boolq["answers"] == [[" yes"], [" no"]]
    s, e = boolq[1]["item_spans"][0]
    assert boolq[1]["prompt"][s:e] == "The northern mountain pass is closed every winter because of snow."


def test_loglikelihood_equals_manual_sum_with_and_without_cache(tiny_lm):
    model, tokenizer = tiny_lm
    context, options = "Question: Which season is coldest?\nAnswer: ", ["winter", "a warm summer", "x"]
    context_ids, option_ids = encode_pair(tokenizer, context, options)
    assert tokenizer.decode(option_ids[0]) == " winter"  # the trailing space moved to the option
    expected = [manual_loglik(model, context_ids, ids) for ids in option_ids]
    # sums of log-probabilities of a spread model: tens to hundreds, with the float32 error of the logits
    assert_close_to_scale(loglikelihood(model, tokenizer, context, options), expected, 1e-5, what="loglik")
    cached = loglikelihood(model, tokenizer, context, options, use_cache=True)
    assert_close_to_scale(cached, expected, 1e-5, what="loglik with cache")
    with pytest.raises(ValueError, match="has no tokens"):
        loglikelihood(model, tokenizer, "Answer:", [" ok", ""])


def test_token_continuation_scores_equal_unbatched_sums(tiny_lm):
    """Tokenised prompts of different lengths, left-padded into one batch with only the last logits kept:
    each row's sum equals one unpadded forward's, and the token counts are the continuations'."""
    model, tokenizer = tiny_lm
    prompts = [tokenizer("Key: ab\nValue:")["input_ids"], tokenizer("A much longer prompt, padded less.")["input_ids"]]
    continuations = [tokenizer(" 42", add_special_tokens=False)["input_ids"], [tokenizer("z")["input_ids"][-1]]]
    scores = token_continuation_scores(model, prompts, continuations, pad_token_id(model, tokenizer))
    expected = [manual_loglik(model, list(p), list(c)) for p, c in zip(prompts, continuations)]
    assert_close_to_scale([total for total, _ in scores], expected, 1e-5, what="token continuation loglik")
    assert [count for _, count in scores] == [len(c) for c in continuations]
    with pytest.raises(ValueError, match="at least one token"):
        token_continuation_scores(model, prompts, [continuations[0], []], 0)
    with pytest.raises(ValueError, match="one continuation per prompt"):
        token_continuation_scores(model, prompts, continuations[:1], 0)


def test_choice_rules():
    arc = build_task("multiple_choice", path=ARC)
    scores, choices = [(-6.0, 2), (-9.0, 6)], [" ab", " abcdefghi"]
    assert arc.rule == "chars" and arc.choose(scores, choices) == 1  # -6/3 = -2 < -9/10
    assert build_task("multiple_choice", path=ARC, normalization="none").choose(scores, choices) == 0
    assert build_task("multiple_choice", path=ARC, normalization="tokens").choose(scores, choices) == 1  # -3 < -1.5
    assert build_task("multiple_choice", path=BOOLQ).rule == "none"
    assert arc.choose([(-1.0, 1), (-1.0, 1)], [" a", " b"]) == 0  # ties: the first option
    assert arc.score(" a dry leaf", [" a dry leaf"]) == 1.0 and arc.score(" a stone", [" a dry leaf"]) == 0.0


def test_runner_scores_by_loglikelihood(tmp_path, tiny_lm):
    model, tokenizer = tiny_lm
    config = RunConfig(out=str(tmp_path), tasks={"multiple_choice": {"path": ARC}}, methods=["baseline", "pi:scale=2"])
    summary = run(config, model=model, tokenizer=tokenizer, progress=False)
    records = {(r["method"], r["id"]): r for r in read_records(tmp_path / "records.jsonl")}
    rows = build_task("multiple_choice", path=ARC).build()
    for row in rows:
        record = records[("baseline", row["id"])]
        expected = loglikelihood(model, tokenizer, row["prompt"], row["choices"])
        assert_close_to_scale(record["loglikelihoods"], expected, 1e-5, what="loglik")
        best = max(range(len(expected)), key=lambda i: expected[i] / len(row["choices"][i]))
        assert record["prediction"] == row["choices"][best] and record["stop_reason"] == "loglikelihood"
        assert record["score"] == float(best == row["label"])
        assert records[("pi:scale=2", row["id"])]["loglikelihoods"] != pytest.approx(expected, abs=1e-4)
    assert summary["results"]["multiple_choice"]["baseline"]["n"] == 3


@dataclass
class LogitHook(Method):
    """Test method acting on generation logits, which log-likelihood scoring cannot honour."""

    name: ClassVar[str] = "test_logit_hook"

    def process_logits(self, step, logits, state):
        return logits


def test_runner_refuses_generation_hooks_on_loglikelihood_tasks(tiny_lm):
    model, tokenizer = tiny_lm
    prepared = prepare_task("multiple_choice", {"path": BOOLQ}, model, tokenizer, DecodeSettings(max_new_tokens=1))
    with pytest.raises(ValueError, match=r"acts through \['process_logits'\]"):
        list(run_stack(model, tokenizer, prepared, MethodStack([LogitHook()])))


def test_tasks_declare_their_decoding_defaults(tmp_path):
    config = RunConfig(
        out=str(tmp_path),
        tasks={
            "ruler_niah_single": {"num_examples": 1, "tokenizer": "byte"},
            "ruler_vt": {"num_examples": 1, "tokenizer": "byte"},
            "babi_qa2": {"num_examples": 1, "lengths": 0},
            "mdqa": {},  # the packaged sample
        },
    )
    settings = {task.name: config.settings(task) for task in config.tasks}
    assert settings["ruler_niah_single"].max_new_tokens == 128
    assert settings["ruler_vt"].stop_strings == ()
    assert (settings["babi_qa2"].max_new_tokens, settings["babi_qa2"].stop_strings) == (16, ("\n",))
    assert (settings["mdqa"].max_new_tokens, settings["mdqa"].stop_strings) == (100, ("\n",))


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="answerKey 'E' is not one of the labels"):
        bad = tmp_path / "arc.jsonl"
        bad.write_text(
            json.dumps({"question": "q", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "E"})
        )
        build_task("multiple_choice", path=str(bad)).build()
    with pytest.raises(ValueError, match="must be true or false"):
        bad = tmp_path / "boolq.jsonl"
        bad.write_text(json.dumps({"question": "q", "passage": "p", "answer": "yes"}))
        build_task("multiple_choice", path=str(bad)).build()
    with pytest.raises(ValueError, match="has boolq fields, but the file is arc"):
        build_task("multiple_choice", path=BOOLQ, format="arc").build()
    with pytest.raises(ValueError, match="neither ARC"):
        bad = tmp_path / "other.jsonl"
        bad.write_text(json.dumps({"text": "t"}))
        build_task("multiple_choice", path=str(bad)).build()
    with pytest.raises(ValueError, match="normalization must be one of"):
        build_task("multiple_choice", path=ARC, normalization="bytes")
