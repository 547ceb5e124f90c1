"""Found in the Middle, amortised: the bias file (versioned, refused when made for something else) and the method
that reads it (with the prompt's own bias it answers as the exact form does)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import torch
from float_checks import assert_close_to_scale

from evaluation.generation import DecodeSettings, TokenizedPrompt, collate, generate_batch, tokenize_prompts
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.fim_bias import (
    FORMAT,
    VERSION,
    length_bucket,
    read_bias_file,
    template_fingerprint,
    write_bias_file,
)
from evaluation.methods.fim_bias import (
    MAKE_ONE as FIX,
)
from evaluation.methods.found_in_middle import FoundInTheMiddle, estimate_bias
from evaluation.model_loading import tiny_default
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt

SETTINGS = DecodeSettings(max_new_tokens=4, batch_size=1)


@dataclass
class Tap(Method):
    """Test helper (not registered): keeps the logits of every step."""

    steps: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.steps.append(logits.clone())
        return logits


def prompts(tokenizer, count=3, docs=3, words=6, header=""):
    """MDQA prompts of `docs` documents (`words` words each); `header` changes the template's text."""
    texts, spans = [], []
    for i in range(count):
        passages = [Passage(f"Title {i}{j}", " ".join(["river"] * words) + f" {i}{j}.") for j in range(docs)]
        text, item_spans = build_mdqa_prompt(f"which river is number {i}?", passages)
        texts.append(header + text)
        spans.append([(s + len(header), e + len(header)) for s, e in item_spans])
    return tokenize_prompts(tokenizer, texts, spans)


def bias_file(tmp_path, model, tokenizer, calibration_prompts, spec="fim", name="bias.json"):
    method = build_method(spec)
    path = tmp_path / name
    write_bias_file(path, estimate_bias(model, tokenizer, calibration_prompts, method, calibration={"test": 1}))
    return path


def generate(model, tokenizer, prompt: TokenizedPrompt, spec: str):
    methods, tap = MethodStack.parse(spec).methods, Tap()
    method, stack = methods[0], MethodStack([*methods, tap])
    with stack.attached(model, tokenizer):
        outputs = generate_batch(model, tokenizer, collate([prompt], tokenizer.pad_token_id), SETTINGS, stack)
    return outputs[0].token_ids, tap.steps, method.last_calibration


def test_with_the_prompts_own_bias_the_amortised_form_answers_as_the_exact_one(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    for prompt in prompts(tokenizer, count=2):
        path = bias_file(tmp_path, model, tokenizer, [prompt])  # N = 1: bias(k) is this prompt's own Attn(x_dum, k)
        exact_tokens, exact_logits, exact = generate(model, tokenizer, prompt, "fim")
        tokens, logits, amortised = generate(model, tokenizer, prompt, f"fim:calibration=amortised,bias_file={path}")
        assert tokens == exact_tokens
        torch.testing.assert_close(amortised.dummy_attention, exact.dummy_attention, rtol=0, atol=0)  # same prefill
        # Attn(x_k, k) from the harness's prefill vs the calibration batch's padded prefill: float paths differ
        assert_close_to_scale(amortised.attention, exact.attention, 1e-5, what="Attn")
        assert_close_to_scale(amortised.alpha, exact.alpha, 1e-4, scale=1.0, what="alpha")
        for step, (a, b) in enumerate(zip(logits, exact_logits)):
            # step 0: the last token over the cache vs inside the prefill (measured <= 1e-6 of max |logits|)
            assert_close_to_scale(a, b, 2e-5, what=f"logits of step {step}")
    baseline = Tap()
    generate_batch(model, tokenizer, collate([prompt], tokenizer.pad_token_id), SETTINGS, MethodStack([baseline]))
    assert not torch.allclose(baseline.steps[0], logits[0], atol=1e-3)  # the edit changed the answer's logits


def test_the_file_is_versioned_json_with_one_bias_per_length_bucket(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    short, long = prompts(tokenizer, count=2, words=2), prompts(tokenizer, count=3, words=12)
    path = bias_file(tmp_path, model, tokenizer, short + long)
    data = json.loads(path.read_text())
    assert (data["format"], data["version"], data["num_items"], data["calibration"]) == (
        FORMAT,
        VERSION,
        3,
        {"test": 1},
    )
    buckets = {length_bucket(p.item_spans) for p in short} | {length_bucket(p.item_spans) for p in long}
    assert set(data["buckets"]) == buckets and len(buckets) == 2
    for bucket, entry in data["buckets"].items():
        assert entry["prompts"] == (2 if bucket == length_bucket(short[0].item_spans) else 3)
        assert len(entry["bias"]) == len(entry["std"]) == 3 and all(b > 0 for b in entry["bias"])
    assert read_bias_file(path).buckets == data["buckets"]
    assert not list(tmp_path.glob("*.tmp*"))  # written through a temporary file, renamed into place


def test_buckets_and_template_fingerprints():
    assert [length_bucket([(0, n)]) for n in (1, 63, 64, 127, 128)] == ["1-1", "32-63", "64-127", "64-127", "128-255"]
    assert length_bucket([(0, 60), (60, 70), (70, 70)]) == "32-63"  # empty (truncated) items do not count
    same = template_fingerprint([1, 2, 3, 9, 9], [(3, 5)]) == template_fingerprint([1, 2, 3, 7], [(3, 4)])
    assert same and template_fingerprint([1, 2, 4, 9], [(3, 4)]) != template_fingerprint([1, 2, 3, 9], [(3, 4)])


def one_line_refusal(model, tokenizer, prompt, spec, match):
    stack = MethodStack.parse(spec)
    with pytest.raises(ValueError, match=match) as error, stack.attached(model, tokenizer):
        generate_batch(model, tokenizer, collate([prompt], tokenizer.pad_token_id), SETTINGS, stack)
    message = str(error.value)
    assert "\n" not in message and "; " in message  # one line: the problem, then the fix
    assert model.config._attn_implementation == "sdpa"  # the probe came off again


def test_a_file_made_for_another_model_template_item_count_or_bucket_is_refused(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    path = bias_file(tmp_path, model, tokenizer, prompts(tokenizer))
    amortised = f"fim:calibration=amortised,bias_file={path}"
    prompt = prompts(tokenizer, count=1)[0]
    other_model, _ = tiny_default(seed=1)
    one_line_refusal(other_model, tokenizer, prompt, amortised, r"made for another model \(tiny.*weights")
    other_template = prompts(tokenizer, count=1, header="Read carefully. ")[0]
    one_line_refusal(model, tokenizer, other_template, amortised, "made for another prompt template")
    four_documents = prompts(tokenizer, count=1, docs=4)[0]
    one_line_refusal(
        model, tokenizer, four_documents, amortised, r"another number of items \(3\), these prompts have 4"
    )
    longer_items = prompts(tokenizer, count=1, words=40)[0]
    one_line_refusal(model, tokenizer, longer_items, amortised, r"has no item-length bucket 256-511 tokens")
    one_line_refusal(model, tokenizer, prompt, amortised + ",dummy=blank", "made for another dummy document")
    one_line_refusal(model, tokenizer, prompt, amortised + ",score_layers=last_half", "made for another score layers")


def test_unreadable_or_foreign_files_are_refused(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    prompt = prompts(tokenizer, count=1)[0]
    path = bias_file(tmp_path, model, tokenizer, [prompt])
    data = json.loads(path.read_text())
    cases = {
        "missing.json": (None, "does not exist"),
        "old.json": ({**data, "version": 0}, "has version 0, this code reads version 1"),
        "other.json": ({"scales": [1.0]}, "is not a Found-in-the-Middle bias file"),
        "broken.json": ("{", "cannot read bias file"),
        "short.json": ({k: v for k, v in data.items() if k != "template"}, "is malformed"),
    }
    bucket = next(iter(data["buckets"]))
    damaged = {  # values a hand edit or a bad copy leaves: each would bias the answers silently if applied
        "nan.json": ([float("nan")] * data["num_items"], "not a finite number"),
        "infinite.json": ([float("inf")] * data["num_items"], "not a finite number"),
        "too-short.json": (data["buckets"][bucket]["bias"][:-1], f"a list of {data['num_items']} numbers"),
        "strings.json": (["0.1"] * data["num_items"], "not a finite number"),
        "not-a-list.json": (0.5, f"a list of {data['num_items']} numbers"),
    }
    for name, (values, message) in damaged.items():
        buckets = {**data["buckets"], bucket: {**data["buckets"][bucket], "bias": values}}
        cases[name] = (json.dumps({**data, "buckets": buckets}), message)  # json writes NaN and Infinity
    cases["items-as-text.json"] = ({**data, "num_items": "3"}, "num_items must be an integer")
    assert "make one with python -m evaluation calibrate-fim" in FIX
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
        spec = f"fim:calibration=amortised,bias_file={tmp_path / name}"
        one_line_refusal(model, tokenizer, prompt, spec, message)


def test_spec_parameters():
    exact = build_method("fim")
    assert (
        exact.spec()
        == "fim:temperature=5e-05,layers=last_half,score_layers=all,target=mean,dummy=mdqa,calibration_batch=0"
    )
    amortised = build_method("fim:calibration=amortised,bias_file=/runs/a/fim-bias.json")
    assert isinstance(amortised, FoundInTheMiddle)
    assert amortised.spec().endswith(",calibration=amortised,bias_file=/runs/a/fim-bias.json")
    for spec, message in [
        ("fim:calibration=amortised", "calibration=amortised needs bias_file=PATH"),
        ("fim:bias_file=/x.json", "calibration=amortised needs bias_file=PATH"),
        ("fim:calibration=cached", r"calibration must be one of \['exact', 'amortised'\]"),
    ]:
        with pytest.raises(ValueError, match=message):
            build_method(spec)


def test_amortised_refuses_to_share_the_forward_with_row_groups(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    prompt = prompts(tokenizer, count=1)[0]
    path = bias_file(tmp_path, model, tokenizer, [prompt])
    amortised = f"fim:calibration=amortised,bias_file={path}"
    one_line_refusal(model, tokenizer, prompt, amortised + "+pcd", "give that method passes=sequential")
    assert generate(model, tokenizer, prompt, amortised + "+pcd:passes=sequential")[0]  # its own forward: fine
