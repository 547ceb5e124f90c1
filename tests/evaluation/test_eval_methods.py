"""Method specs, the registry, stacking order, prefill position overrides, and PI as a position policy."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from method_helpers import PROMPTS, gqa_llama, tokens

from evaluation.generation import DecodeSettings, collate, generate, generate_batch, tokenize_prompts
from evaluation.methods import (
    METHODS,
    Method,
    MethodStack,
    PositionInterpolation,
    ScaledRopePolicy,
    build_method,
    configure_method,
    parse_method_spec,
    register_method,
)
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM, layer_policies, record_positions
from repo_train.modeling.presets import tiny

SETTINGS = DecodeSettings(max_new_tokens=8, batch_size=3)


def test_spec_parsing_types_and_canonical_labels():
    assert parse_method_spec("m:a=1,b=2.5,c=true,d=False,e=text") == (
        "m",
        {"a": 1, "b": 2.5, "c": True, "d": False, "e": "text"},
    )
    assert parse_method_spec("baseline") == ("baseline", {})
    assert build_method("pi:scale=2").spec() == build_method("pi:scale=2.0").spec() == "pi:scale=2"
    assert MethodStack.parse("baseline+pi:scale=1e+3").label == "baseline+pi:scale=1000"
    assert MethodStack([]).label == "baseline" and set(METHODS) >= {"baseline", "pi"}


def test_a_class_entry_is_configured_as_its_spec_would_be_without_a_spec_string():
    from evaluation.methods.caliope import Caliope

    assert configure_method(PositionInterpolation, {"scale": 2}) == build_method("pi:scale=2")
    assert type(configure_method(PositionInterpolation, {"scale": 2}).scale) is float
    assert configure_method(Caliope, {"calibrator": "hourglass", "markers": None}).markers is None  # YAML null
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['size'\] for method 'pi'"):
        configure_method(PositionInterpolation, {"scale": 2, "size": 1})
    for markers in ("Doc,Title", "a+b", "Doc "):  # would read back as another parameter, method or value
        with pytest.raises(ValueError, match=r"markers=.* cannot be part of its spec"):
            configure_method(Caliope, {"calibrator": "moses", "boundaries": "markers", "markers": markers})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("pi:scale=2,foo=1", r"unknown parameter\(s\) \['foo'\] for method 'pi'; valid parameters are \['scale'\]"),
        ("nosuch", r"unknown method 'nosuch'; registered methods are \["),
        ("pi", r"method 'pi' needs parameter\(s\) \['scale'\]"),
        ("pi:scale", "write key=value"),
        ("pi:scale=two", "scale must be float, got 'two'"),
        ("pi:scale=0", "scale must be > 0"),
        ("pi:scale=1,scale=2", "given twice"),
        ("9bad", "expected NAME or NAME:key=value"),
        ("", "empty method spec"),
    ],
)
def test_spec_errors_are_clear(spec, message):
    with pytest.raises(ValueError, match=message):
        MethodStack.parse(spec)


@register_method
@dataclass
class Tracer(Method):
    """Test method: logs its hooks, shifts prefill positions and adds to the logits."""

    name: ClassVar[str] = "test_tracer"
    tag: str = "t"
    shift: int = 0
    log: list = field(default_factory=list, init=False, repr=False)

    def attach(self, model, tokenizer):
        self.log.append(("attach", self.tag))

    def detach(self, model):
        self.log.append(("detach", self.tag))

    def start(self, state):
        self.log.append(("start", self.tag))

    def finish(self, state):
        self.log.append(("finish", self.tag))

    def prefill_position_ids(self, batch):
        self.log.append(("positions", self.tag, batch.position_ids[0, -1].item()))
        return batch.position_ids + self.shift if self.shift else None

    def process_logits(self, step, logits, state):
        if step == 0:
            self.log.append(("logits", self.tag))
        return logits


def test_stack_applies_methods_in_order_and_detaches_in_reverse(tiny_lm):
    model, tokenizer = tiny_lm
    log: list = []
    first, second = Tracer(tag="a", shift=5), Tracer(tag="b")
    first.log = second.log = log
    stack = MethodStack([first, second])
    assert stack.label == "test_tracer:tag=a,shift=5+test_tracer:tag=b,shift=0"
    assert build_method("test_tracer:tag=x,shift=3") == Tracer(tag="x", shift=3)
    with stack.attached(model, tokenizer):
        generate(model, tokenizer, ["abc"], SETTINGS, stack)
    last = len("abc") - 1
    assert log == [
        ("attach", "a"),
        ("attach", "b"),
        ("start", "a"),
        ("start", "b"),
        ("positions", "a", last),
        ("positions", "b", last + 5),  # the second method sees the first one's positions
        ("logits", "a"),
        ("logits", "b"),
        ("finish", "b"),
        ("finish", "a"),
        ("detach", "b"),
        ("detach", "a"),
    ]


@dataclass
class FixedPositions(Method):
    """Test method: returns the default positions itself, as long or float."""

    name: ClassVar[str] = "test_fixed_positions"
    as_float: bool = False
    seen: list = field(default_factory=list, init=False, repr=False)

    def prefill_position_ids(self, batch):
        self.seen.append(batch)
        positions = (batch.attention_mask.cumsum(-1) - 1).masked_fill(batch.attention_mask == 0, 0)
        return positions.float() if self.as_float else positions


@pytest.mark.parametrize("as_float", [False, True])
def test_prefill_override_with_default_positions_changes_nothing(tiny_lm, as_float):
    model, tokenizer = tiny_lm
    baseline = generate(model, tokenizer, PROMPTS, SETTINGS)
    override = generate(model, tokenizer, PROMPTS, SETTINGS, MethodStack([FixedPositions(as_float=as_float)]))
    assert tokens(override) == tokens(baseline)


def test_shifted_prefill_positions_continue_after_the_largest(tiny_lm):
    model, tokenizer = tiny_lm
    shifted = MethodStack([Tracer(shift=100)])
    batch = collate(tokenize_prompts(tokenizer, PROMPTS), tokenizer.pad_token_id)
    recorded = []

    @dataclass
    class Spy(Method):
        name: ClassVar[str] = "test_spy"

        def process_logits(self, step, logits, state):
            recorded.append(state.position_ids.clone())
            return logits

    generate_batch(model, tokenizer, batch, DecodeSettings(max_new_tokens=3), MethodStack([*shifted.methods, Spy()]))
    lengths = batch.attention_mask.sum(-1)
    assert torch.equal(recorded[1][:, 0], lengths + 100)  # first decode step: max prefill position + 1
    assert torch.equal(recorded[2][:, 0], lengths + 101)


def test_pi_scale_one_equals_baseline_exactly_and_restores_policies(tiny_lm):
    model, tokenizer = tiny_lm
    before = layer_policies(model)
    ids = torch.tensor([list(range(2, 40))])
    with torch.no_grad():
        reference = model(ids).logits
    baseline = generate(model, tokenizer, PROMPTS, SETTINGS)
    stack = MethodStack.parse("pi:scale=1")
    with stack.attached(model, tokenizer):
        assert all(isinstance(p, ScaledRopePolicy) for p in layer_policies(model))
        with torch.no_grad():  # exact: positions / 1.0 are the same floats, tables equal HF's, rotation elementwise
            assert torch.equal(model(ids).logits, reference)
        assert tokens(generate(model, tokenizer, PROMPTS, SETTINGS, stack)) == tokens(baseline)
    assert layer_policies(model) == before


def test_pi_scale_two_divides_positions_in_every_layer_and_changes_outputs(tiny_lm):
    model, tokenizer = tiny_lm
    baseline = generate(model, tokenizer, PROMPTS, SETTINGS)
    stack = MethodStack.parse("pi:scale=2")
    with stack.attached(model, tokenizer):
        with torch.no_grad(), record_positions(model) as rec:
            model(torch.tensor([list(range(2, 14))]))
        scaled = generate(model, tokenizer, PROMPTS, SETTINGS, stack)
    assert len(rec.positions) == model.config.num_hidden_layers
    for positions in rec.positions:
        assert torch.equal(positions, (torch.arange(12.0) / 2).expand(1, model.config.num_attention_heads, 12))
    assert tokens(scaled) != tokens(baseline)


def test_pi_on_a_model_without_policies_leaves_it_untouched_after_detach(spread):
    tokenizer = byte_tokenizer()
    model = spread(gqa_llama(tokenizer))
    untouched = tokens(generate(copy.deepcopy(model), tokenizer, PROMPTS, SETTINGS))
    stack = MethodStack.parse("pi:scale=1.5")
    with stack.attached(model, tokenizer):
        scaled = tokens(generate(model, tokenizer, PROMPTS, SETTINGS, stack))
    assert scaled != untouched
    assert tokens(generate(model, tokenizer, PROMPTS, SETTINGS)) == untouched  # all-RoPE policies stay behind


def test_pi_refuses_learned_position_layers():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo")).eval()
    with (
        pytest.raises(ValueError, match="layer 1 uses the 'repo' policy"),
        MethodStack.parse("pi:scale=2").attached(model, None),
    ):
        pass
    assert [p.name for p in layer_policies(model)] == ["rope", "repo", "repo", "repo"]
