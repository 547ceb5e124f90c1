"""CALIOPE: the c(m) schedules against the paper's formulas, Φ(t) on a hand-made prompt, identity = baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch

from evaluation.generation import DecodeSettings, collate, generate_batch, tokenize_prompts
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.caliope import Caliope, gap_schedule
from evaluation.tasks.base import join_items
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_train.modeling import record_positions

SETTINGS = DecodeSettings(max_new_tokens=6, batch_size=2)


@dataclass
class LogitsTap(Method):
    """Test method: keeps the logits of every step."""

    name: ClassVar[str] = "test_caliope_tap"
    seen: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.seen.append(logits.clone())
        return logits


def documents_batch(tokenizer, docs=("alpha beta", "gamma", "delta epsilon zeta")):
    """Two prompts (different lengths, so one is left-padded) with item spans; byte tokens = characters."""
    built = [
        join_items("Read:\n", list(docs), "\nQ: which?\nA:"),
        join_items("R:\n", list(docs[:2]), "\nQ?\nA:"),
    ]
    prompts = tokenize_prompts(tokenizer, [p for p, _ in built], [s for _, s in built])
    return collate(prompts, tokenizer.pad_token_id), built


def hand_phi(length: int, starts: list[int], c: list[float]) -> list[float]:
    """Φ(t) = t + c(m(t)), m(t) = number of documents starting at or before t."""
    return [t + c[sum(1 for s in starts if s <= t)] for t in range(length)]


def test_schedules_match_the_formulas_written_out():
    assert gap_schedule("identity", 4) == [0.0] * 5
    # Moses: c = 0 up to chunk floor(d/2), Δ_gap after it.
    assert gap_schedule("moses", 4) == [0, 0, 0, 10_000, 10_000]
    assert gap_schedule("moses", 5, delta_gap=7) == [0, 0, 0, 7, 7, 7]
    # Hourglass, d = 4: u_k = k/3, gap_k = 5 + 4 u_k (1 - u_k) 995 -> 5 + 995·8/9 for k = 1, 2 and 5 for k = 3.
    g = 5 + 995 * 8 / 9
    assert gap_schedule("hourglass", 4) == pytest.approx([0, 0, g, 2 * g, 2 * g + 5])
    # d = 3: u = 1/2 (gap Δ_max), then u = 1 (gap Δ_min).
    assert gap_schedule("hourglass", 3, delta_min=2, delta_max=50) == pytest.approx([0, 0, 50, 52])
    # Decay: gap_k = Δ_0 λ^k.
    assert gap_schedule("decay", 4) == pytest.approx([0, 0, 950, 950 + 902.5, 950 + 902.5 + 857.375])
    assert gap_schedule("decay", 3, delta_0=8, lam=0.5) == pytest.approx([0, 0, 4, 6])
    for calibrator in ("identity", "moses", "hourglass", "decay"):  # degenerate sizes
        assert gap_schedule(calibrator, 0) == [0.0]
        assert gap_schedule(calibrator, 1) == ([0.0, 10_000.0] if calibrator == "moses" else [0.0, 0.0])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("caliope", r"needs parameter\(s\) \['calibrator'\]"),
        ("caliope:calibrator=sandglass", "unknown calibrator 'sandglass'"),
        ("caliope:calibrator=moses,delta_gap=-1", "delta_gap=-1 < 0 would make a gap negative"),
        ("caliope:calibrator=hourglass,delta_min=-5", "delta_min=-5 < 0"),
        ("caliope:calibrator=hourglass,delta_max=-1", "delta_max=-1 < 0"),
        ("caliope:calibrator=hourglass,delta_min=10,delta_max=1", "delta_min=10 > delta_max=1 would invert"),
        ("caliope:calibrator=hourglass,delta_min=2000", "delta_min=2000 > delta_max=1000 would invert"),
        ("caliope:calibrator=decay,lam=-0.5", "lam=-0.5 < 0"),
        ("caliope:calibrator=decay,delta_0=inf", "delta_0 must be a finite number"),
        ("caliope:calibrator=moses,delta_min=3", r"\['delta_min'\] not parameter\(s\) of calibrator 'moses'"),
        ("caliope:calibrator=moses,boundaries=lines", "boundaries must be one of"),
        ("caliope:calibrator=moses,markers=Doc", "markers only applies with boundaries=markers"),
    ],
)
def test_bad_parameters_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        build_method(spec)


def test_labels_name_only_the_parameters_that_apply():
    assert (
        build_method("caliope:calibrator=hourglass").spec()
        == build_method("caliope:calibrator=hourglass,delta_min=5,delta_max=1000").spec()
    )
    assert build_method("caliope:calibrator=decay").spec() == (
        "caliope:calibrator=decay,delta_0=1000,lam=0.95,boundaries=spans"
    )
    again = build_method(build_method("caliope:calibrator=moses,boundaries=markers").spec())
    assert again == Caliope(calibrator="moses", boundaries="markers", markers="Document [")


def test_identity_equals_the_baseline_exactly(tiny_lm):
    model, tokenizer = tiny_lm
    batch, _ = documents_batch(tokenizer)
    base_tap, id_tap = LogitsTap(), LogitsTap()
    baseline = generate_batch(model, tokenizer, batch, SETTINGS, MethodStack([base_tap]))
    stack = MethodStack([build_method("caliope:calibrator=identity"), id_tap])
    with stack.attached(model, tokenizer):
        identity = generate_batch(model, tokenizer, batch, SETTINGS, stack)
    assert [g.token_ids for g in identity] == [g.token_ids for g in baseline]
    assert len(id_tap.seen) == len(base_tap.seen)
    # exact: the identity calibrator hands the harness's positions through unchanged, so the same kernels run
    assert all(torch.equal(a, b) for a, b in zip(id_tap.seen, base_tap.seen))


@pytest.mark.parametrize(
    ("spec", "c_three", "c_two"),
    [
        # moses: floor(3/2) = 1 and floor(2/2) = 1, so the gap opens before chunk 2 in both prompts
        ("caliope:calibrator=moses,delta_gap=100", [0, 0, 100, 100], [0, 0, 100]),
        # decay: gaps 8·0.5 = 4, 8·0.25 = 2
        ("caliope:calibrator=decay,delta_0=8,lam=0.5", [0, 0, 4, 6], [0, 0, 4]),
    ],
)
def test_positions_follow_phi_and_generation_continues_after_the_largest(tiny_lm, spec, c_three, c_two):
    model, tokenizer = tiny_lm
    batch, built = documents_batch(tokenizer)
    stack = MethodStack.parse(spec)
    steps = 3
    with stack.attached(model, tokenizer), record_positions(model) as rec:
        generate_batch(model, tokenizer, batch, DecodeSettings(max_new_tokens=steps, batch_size=2), stack)
    layers = model.config.num_hidden_layers
    prefill = rec.positions[0][:, 0]  # layer 0, first forward: [B, S]
    assert all(torch.equal(rec.positions[i][:, 0], prefill) for i in range(layers))  # every RoPE layer
    for row, ((prompt, spans), c) in enumerate(zip(built, (c_three, c_two))):
        pad = batch.pad_lengths[row]
        expected = torch.tensor(hand_phi(len(prompt), [s for s, _ in spans], c), dtype=torch.float32)
        assert torch.equal(prefill[row, pad:], expected)
        assert bool((prefill[row, pad:].diff() > 0).all())  # strictly increasing
        assert bool((prefill[row, :pad] <= expected[0]).all())  # padding not above the first real position
        for step in range(1, steps):  # decode forwards: max Φ + step
            assert float(rec.positions[step * layers][row, 0, 0]) == float(expected.max()) + step


def recomputed_argmax(model, batch, prefill_positions, generated):
    """Greedy choices recomputed without a cache: the whole sequence every step, positions continuing max + 1."""
    ids, mask, positions = batch.input_ids, batch.attention_mask, prefill_positions
    following = positions.masked_fill(mask == 0, -1e9).amax(dim=1, keepdim=True) + 1
    chosen = []
    with torch.no_grad():
        for step in range(generated.shape[1]):
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
            chosen.append(logits.argmax(-1))
            ids = torch.cat([ids, generated[:, step : step + 1]], dim=1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = torch.cat([positions, (following + step).to(positions.dtype)], dim=1)
    return torch.stack(chosen, dim=1)


def test_cached_generation_equals_recomputation(tiny_lm):
    model, tokenizer = tiny_lm
    batch, _ = documents_batch(tokenizer)
    stack = MethodStack.parse("caliope:calibrator=hourglass,delta_min=2.5,delta_max=40")
    with stack.attached(model, tokenizer):
        outputs = generate_batch(model, tokenizer, batch, SETTINGS, stack)
        positions = stack.methods[0].prefill_position_ids(batch)
    assert positions.dtype == torch.float32  # fractional gaps
    generated = torch.tensor([g.token_ids + [0] * (SETTINGS.max_new_tokens - len(g.token_ids)) for g in outputs])
    again = recomputed_argmax(model, batch, positions, generated)
    for row, g in enumerate(outputs):
        assert again[row, : len(g.token_ids)].tolist() == g.token_ids


def test_markers_mode_finds_the_same_chunks_as_item_spans(tiny_lm):
    model, tokenizer = tiny_lm
    passages = [Passage("One", "first text"), Passage("Two", "second"), Passage("Three", "third one")]
    prompt, spans = build_mdqa_prompt("what?", passages)
    spanned = collate(tokenize_prompts(tokenizer, [prompt], [spans]), tokenizer.pad_token_id)
    bare = collate(tokenize_prompts(tokenizer, [prompt]), tokenizer.pad_token_id)
    by_spans = build_method("caliope:calibrator=moses,delta_gap=50")
    by_markers = build_method("caliope:calibrator=moses,delta_gap=50,boundaries=markers")
    by_markers.attach(model, tokenizer)
    assert by_markers.chunk_starts(bare, 0) == [s for s, _ in spans]
    assert torch.equal(by_markers.prefill_position_ids(bare), by_spans.prefill_position_ids(spanned))


def test_missing_chunks_are_a_clear_error(tiny_lm):
    model, tokenizer = tiny_lm
    bare = collate(tokenize_prompts(tokenizer, ["no documents here"]), tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="row 0 has no item spans"):
        build_method("caliope:calibrator=moses").prefill_position_ids(bare)
    markers = build_method("caliope:calibrator=moses,boundaries=markers")
    markers.attach(model, tokenizer)
    with pytest.raises(ValueError, match=r"none of the markers \['Document \['\] occurs"):
        markers.prefill_position_ids(bare)
