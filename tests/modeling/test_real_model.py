"""The positional core and every evaluation method on real pretrained weights: SmolLM2-135M-Instruct.

A Llama (30 layers, 9 query / 3 key-value heads, head_dim 64, RoPE θ = 1e5) made by `python -m repo_train
real-model` (the `real_model_dir` fixture). The tiny random models of the other tests cannot show that the
hook is invisible on weights somebody else trained, or that a method copes with GQA 3:1 and 30 layers.

Prompts are MDQA prompts of the packaged Lost in the Middle sample with every passage cut to its first
`WORDS` words (3 documents, ~220 tokens in the model's chat template), so a forward takes about a second on
one CPU thread. Slow tests (`pytest -m slow`); the whole file takes ~2 minutes with one thread.
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
from float_checks import assert_close_to_scale, assert_greedy
from transformers import LlamaForCausalLM

from evaluation.attention_probe import probe_of
from evaluation.generation import DecodeSettings, collate, generate, tokenize_prompts
from evaluation.methods import Method, MethodStack
from evaluation.methods.found_in_middle import document_index, redistribute
from evaluation.methods.pcd import contrast_logits
from evaluation.methods.scaling_baselines import combine_buckets
from evaluation.model_loading import load_model
from evaluation.prompt_format import PromptFormat
from evaluation.runner import RunConfig, run
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import build_task
from repo_train.modeling import RopePolicy, install_position_policies, layer_policies, record_positions
from repo_train.modeling.attention import attention_modules
from repo_train.modeling.swapping import current_policies, swapped_policies
from search.fitness import FitnessResult, SubsetWeights
from search.ga import GAConfig
from search.genome import CurveGenome, SearchSpace
from search.scale_file_writer import ScaleFile, config_sha256, search_section, write_scale_file

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

LAYERS = 30
#: Words kept of each passage: prompts of ~190 tokens raw, ~220 in the chat template.
WORDS = 24
#: The MDQA task's own stop string, and few tokens: answers are judged non-empty, not right.
SETTINGS = DecodeSettings(max_new_tokens=4, batch_size=2, stop_strings=("\n",))


# -- fixtures: the model once per module, short MDQA prompts, a 30-layer scale file --------------------------------


@pytest.fixture(scope="module")
def smollm(real_model_dir):
    """(model, tokenizer) as the harness loads them (float32, SDPA); methods install and restore policies on it."""
    model, tokenizer = load_model(real_model_dir)
    assert isinstance(model, LlamaForCausalLM) and model.config.num_hidden_layers == LAYERS
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (9, 3)
    return model, tokenizer


@pytest.fixture(scope="module")
def short_sample(tmp_path_factory) -> str:
    """The packaged nq-open-oracle sample with every passage cut to its first WORDS words."""
    path = tmp_path_factory.mktemp("mdqa") / "nq-open-oracle.short.jsonl"
    with gzip.open(NQ_OPEN_ORACLE, "rt", encoding="utf-8") as source:
        records = [json.loads(line) for line in source if line.strip()]
    for record in records:
        for ctx in record["ctxs"]:
            ctx["text"] = " ".join(ctx["text"].split()[:WORDS])
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def mdqa(smollm, short_sample):
    """Two chat-templated MDQA prompts of different lengths (question 0, gold first; question 1, gold last)."""
    _, tokenizer = smollm
    rows = list(build_task("mdqa", path=short_sample, num_documents=3, num_examples=2, gold_positions=[0, 2]).build())
    assert [r["gold_position"] for r in rows] == [0, 2, 0, 2]
    chosen = [rows[0], rows[3]]
    texts, spans = PromptFormat(chat_template=True).apply(
        tokenizer, [r["prompt"] for r in chosen], [r["item_spans"] for r in chosen]
    )
    prompts = tokenize_prompts(tokenizer, texts, spans, add_special_tokens=False)
    lengths = [len(p.input_ids) for p in prompts]
    assert lengths[0] != lengths[1] and max(lengths) < 300, lengths  # a left-padded batch, short forwards
    assert all(len(p.item_spans) == 3 for p in prompts)
    return texts, spans


@pytest.fixture(scope="module")
def scale_file(smollm, tmp_path_factory) -> str:
    """A 30-layer LPES scale file as `python -m search run` writes it (Bézier through 4 points, scales 1.2–1.8)."""
    model, _ = smollm
    space = SearchSpace(LAYERS, num_points=4)
    genome = CurveGenome((0, 10, 20, LAYERS - 1), (12, 18, 16, 13))
    section = search_section(GAConfig(), SubsetWeights(), "ab" * 32, generations=1, wall_time_s=0.0)
    record = {"name": "smollm2-135m-instruct", "config_sha256": config_sha256(model.config)}
    fitness = FitnessResult(0.5, {"begin": 0.5, "middle": 0.5, "end": 0.5})
    path = tmp_path_factory.mktemp("lpes") / "smollm2.json"
    write_scale_file(path, ScaleFile.from_genome(space, genome, fitness, record, section))
    return str(path)


# -- 1. the hook is invisible: RopePolicy on every layer == the untouched Llama, bit for bit -------------------------


def test_rope_policies_on_every_layer_leave_the_llama_bit_identical(real_model_dir, smollm, mdqa):
    _, tokenizer = smollm
    untouched = LlamaForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    hooked = copy.deepcopy(untouched)
    install_position_policies(hooked, [RopePolicy() for _ in range(LAYERS)])
    assert len(layer_policies(hooked)) == LAYERS
    texts, spans = mdqa
    batch = collate(tokenize_prompts(tokenizer, texts, spans, add_special_tokens=False), tokenizer.pad_token_id)
    assert int((batch.attention_mask == 0).sum()) > 0  # the shorter row is left-padded
    single = batch.input_ids[:1, (batch.attention_mask[0] == 0).sum() :]
    with torch.no_grad():
        # exact: RopePolicy() hands back HF's own cos/sin, so the same kernels run on the same inputs in order
        assert torch.equal(hooked(single).logits, untouched(single).logits)
        kwargs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
        with record_positions(hooked) as recorded:
            padded = hooked(**kwargs).logits
        assert torch.equal(padded, untouched(**kwargs).logits)
    assert len(recorded.positions) == LAYERS  # every layer went through its policy
    assert all(torch.equal(p[:, 0], batch.position_ids.float()) for p in recorded.positions)


# -- 2 and 3. every method: answers through the harness, and its cached decoding equals a recomputation ------------


@dataclass
class Tap(Method):
    """Test method (last in the stack, not registered): the logits each step ends with, and the batch as decoded."""

    name: ClassVar[str] = "test_real_model_tap"
    logits: list = field(default_factory=list, init=False)
    active: list = field(default_factory=list, init=False)
    batch: object = field(default=None, init=False)
    generated: torch.Tensor | None = field(default=None, init=False)

    def process_logits(self, step, logits, state):
        self.logits.append(logits.clone())
        self.active.append(~state.finished)  # rows that pick a token this step (finished rows are fed the pad)
        return logits

    def finish(self, state):
        self.batch, self.generated = state.batch, state.generated.clone()


def full_inputs(batch, generated):
    """Prompt + every generated token fed back (the last one never is), positions going on at max + 1."""
    steps = generated.shape[1]
    mask = batch.attention_mask
    positions = batch.position_ids
    following = positions.masked_fill(mask == 0, -1e9).amax(dim=1, keepdim=True) + 1
    decode = (following + torch.arange(steps - 1)).to(positions.dtype)
    return dict(
        input_ids=torch.cat([batch.input_ids, generated[:, : steps - 1]], dim=1),
        attention_mask=torch.cat([mask, torch.ones_like(generated[:, : steps - 1])], dim=1),
        position_ids=torch.cat([positions, decode], dim=1),
        logits_to_keep=steps,
    )


@torch.no_grad()
def recomputed_logits(model, stack: MethodStack, tap: Tap) -> torch.Tensor:
    """`[B, steps, V]`: each step's final logits from forwards over the whole sequence, no cache (while attached)."""
    steps = tap.generated.shape[1]
    inputs = full_inputs(tap.batch, tap.generated)
    method = stack.methods[0]

    def forward(policies=None):
        if policies is None:
            return model(**inputs).logits.float()
        with swapped_policies(model, policies):
            return model(**inputs).logits.float()

    if method.name == "pcd":  # the contrast of the standard and the over-rotated forward, on the top γ
        standard, local = forward(), forward(method._policies)
        return torch.stack(
            [contrast_logits(standard[:, s], local[:, s], method.beta, method.gamma) for s in range(steps)], dim=1
        )
    if method.name == "attention_buckets":  # one forward per RoPE base, combined per step
        per_bucket = [forward(policies) for policies in method._buckets]
        return torch.stack([combine_buckets([b[:, s] for b in per_bucket], method.combine) for s in range(steps)], 1)
    if method.name == "fim":  # every current row (last prompt token, each generated token) redistributed as cached
        index = document_index(tap.batch.item_token_spans, tap.batch.input_ids.shape[1])
        alpha, target, layers = method.last_calibration.alpha, method.target, method._state["edit"]
        probe = probe_of(model)
        probe.request(edit=lambda _, w: redistribute(w, index, alpha, target), edit_layers=layers, query_rows=steps)
        try:
            return forward()
        finally:
            probe.clear()
    return forward()  # position methods: the prefill positions the stack chose, then max + 1, + 2, ...


#: Every method of the harness, with gaps sized to this ~220-token context: the published CALIOPE gaps add
#: thousands of positions (moses' 10,000 alone is past SmolLM2's 8,192), so they are scaled down to tens;
#: hourglass and decay give fractional positions. Two RoPE bases for the buckets (the model's own and half).
METHOD_SPECS = [
    "baseline",
    "pi:scale=2",
    "lpes",
    "caliope:calibrator=identity",
    "caliope:calibrator=moses,delta_gap=64",
    "caliope:calibrator=hourglass,delta_min=2.5,delta_max=40",
    "caliope:calibrator=decay,delta_0=50,lam=0.9",
    "fim",
    "pcd",
    "ms_poe",
    "attention_buckets:bases=100000|50000",
]


@pytest.mark.parametrize("spec", METHOD_SPECS)
def test_method_answers_and_its_cached_decoding_equals_recomputation(smollm, mdqa, scale_file, spec):
    model, tokenizer = smollm
    texts, spans = mdqa
    if spec == "lpes":
        spec = f"lpes:scale_file={scale_file}"
    stack = MethodStack.parse(spec)
    tap = Tap()
    full = MethodStack([*stack.methods, tap])
    with full.attached(model, tokenizer):
        outputs = generate(model, tokenizer, texts, SETTINGS, full, item_spans=spans)
        again = recomputed_logits(model, stack, tap)
    # 3: the harness runs the method on this model and decodes every prompt (an answer may be empty: under the
    # Ms-PoE authors' rule for shared key heads, SmolLM2 ends one of these answers at its first token)
    assert [o.prompt_tokens for o in outputs] and all(o.token_ids for o in outputs), [o.text for o in outputs]
    # 2: the logits of each KV-cached step are those of one forward over the whole sequence, and so are the tokens
    cached = torch.stack(tap.logits, dim=1)
    active = torch.stack(tap.active, dim=1)
    assert cached.shape == again.shape and bool(active[:, 0].all())
    # measured (one thread): <= 1.7e-6 of max |logits|, 6.8e-6 for PCD's contrast (1 + β) L - β L*
    assert_close_to_scale(cached[active], again[active], 1e-4, what=f"{spec}: cached vs recomputed logits")
    recomputed = again[active]
    finite = recomputed.isfinite()
    # PCD excludes all but the top γ tokens (-inf): floor them at the finite minimum, so the scale stays finite
    # and a chosen excluded token would fail by the whole logit range
    recomputed = recomputed.masked_fill(~finite, recomputed[finite].min())
    assert_greedy(recomputed, tap.generated[active], what=f"{spec}: greedy tokens")


# -- 3. a method that cannot apply to this model says so in one line, before anything runs -------------------------


@pytest.fixture(scope="module")
def four_layer_scale_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lpes4") / "four.json"
    path.write_text(json.dumps({"format_version": 1, "num_layers": 4, "scales": [1.5] * 4}))
    return str(path)


def attention_state(model) -> list[tuple[type, object]]:
    """Each layer's attention class and position policy (None when no policy is installed)."""
    return [(type(attn), getattr(attn, "position_policy", None)) for attn in attention_modules(model)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lpes", r"has scales for 4 layers, the model has 30: use a scale file searched for this model"),
        ("ms_poe:start_layer=30", r"ms_poe: start_layer=30 but the model has 30 layers"),
        ("fim:layers=30", r"bad layer spec '30' for a 30-layer model"),
        ("fim:score_layers=none", r"fim: score_layers selects no layer"),
    ],
    ids=["lpes-4-layer-file", "ms_poe-start-layer", "fim-layers", "fim-score-layers"],
)
def test_methods_that_cannot_apply_refuse_in_one_line(smollm, tmp_path, four_layer_scale_file, spec, message):
    model, tokenizer = smollm
    if spec == "lpes":
        spec = f"lpes:scale_file={four_layer_scale_file}"
    current_policies(model)  # all-RoPE, as the first method to attach leaves it (bit-identical: the first test)
    before = attention_state(model)
    config = RunConfig(out=str(tmp_path / "run"), tasks={"mdqa": {"num_documents": 3}}, methods=["baseline", spec])
    with pytest.raises(ValueError, match=message) as refused:
        run(config, model, tokenizer, progress=False)  # the runner attaches every stack before it writes anything
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "run" / "records.jsonl").exists()
    assert attention_state(model) == before and model.config._attn_implementation == "sdpa"  # nothing left behind


def test_caliope_markers_match_the_spans_on_raw_prompts_and_refuse_chat_templated_ones(smollm, short_sample, mdqa):
    _, tokenizer = smollm
    rows = list(build_task("mdqa", path=short_sample, num_documents=3, num_examples=2, gold_positions=[0]).build())
    raw = collate(
        tokenize_prompts(tokenizer, [r["prompt"] for r in rows], [r["item_spans"] for r in rows]),
        tokenizer.pad_token_id,
    )
    by_spans = MethodStack.parse("caliope:calibrator=moses,delta_gap=64").methods[0]
    by_markers = MethodStack.parse("caliope:calibrator=moses,delta_gap=64,boundaries=markers").methods[0]
    by_markers.attach(None, tokenizer)
    assert torch.equal(by_markers.prefill_position_ids(raw), by_spans.prefill_position_ids(raw))
    # decoding drops the chat template's special tokens, so the ids do not round-trip: refused, not guessed
    texts, _ = mdqa
    templated = collate(tokenize_prompts(tokenizer, texts), tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="use boundaries=spans with the task's item spans") as refused:
        by_markers.prefill_position_ids(templated)
    assert "\n" not in str(refused.value)


# -- 3. the runner end to end on the real model -------------------------------------------------------------------


def test_runner_writes_records_and_summary_for_pi_and_lpes(smollm, short_sample, scale_file, tmp_path):
    model, tokenizer = smollm
    methods = ["baseline", "pi:scale=2", f"lpes:scale_file={scale_file}"]
    task = {"path": short_sample, "num_documents": 3, "num_examples": 1, "gold_positions": [0, 2]}
    config = RunConfig(out=str(tmp_path), tasks={"mdqa": task}, methods=methods, max_new_tokens=3, batch_size=2)
    summary = run(config, model, tokenizer, progress=False)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["gold_position"]) for r in records) == sorted(
        (MethodStack.parse(m).label, g) for m in methods for g in (0, 2)
    )
    assert all(isinstance(r["prediction"], str) and 150 < r["prompt_tokens"] < 300 for r in records)
    assert set(summary["results"]["mdqa"]) == {MethodStack.parse(m).label for m in methods}
