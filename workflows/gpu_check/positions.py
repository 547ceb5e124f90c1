"""Every position method on a tiny model, through the harness's decode loop: the three GPU checks of a method.

- bf16 on the device vs fp32 on the CPU: the logits of every decoding step, with
  the device run forced to the CPU run's tokens, so both see the same sequence;
- KV-cached decoding vs recomputation, on the device in fp32: each step's logits
  against the same logits computed without the cache (how depends on where the
  method acts: `MethodCase.recompute`);
- flash_attention_2 vs sdpa, both bf16 on the device, when flash-attn is installed.

The model methods (rope, nope, r2n1, n2r1, repo) are models built with that
`position_method`; the evaluation methods (lpes, pi, caliope, pcd, fim, ms_poe,
attention_buckets) are method stacks on the RoPE model, as `python -m
evaluation run` applies them. The prompts are two MDQA-format prompts of
different lengths (so one is left-padded) with their document spans.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evaluation.attention_probe import probe_of
from evaluation.generation import tokenize_prompts
from evaluation.methods import Method, MethodStack
from evaluation.methods.decoding import DecodeSettings, TokenizedPrompt, collate, generate_batch
from evaluation.methods.found_in_middle import document_index, redistribute, resolve_layers
from evaluation.model_loading import byte_tokenizer, load_model
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_common.atomic import write_json_atomic
from repo_train.modeling import RePoOlmo2ForCausalLM, attention_modules
from repo_train.modeling.presets import tiny
from repo_train.real_model import DEFAULT_OUT
from workflows.gpu_check.method_cases import CASE_NAMES, CASES, MethodCase
from workflows.gpu_check.rows import Row, guarded, relative_difference, skip, within

#: bf16 vs fp32 logits, relative to max |fp32 logit|. Measured with bf16 on a 2-core CPU: 2.6e-3 to 3.0e-2 (repo's
#: positions in the hundreds and caliope's gaps of up to 1,000 the largest); scaling positions by 1.01 moves them 0.17.
BF16_TOLERANCE = 0.1
#: flash_attention_2 vs sdpa, both bf16: two bf16 kernels round differently, layer after layer, as bf16 vs fp32 do.
FLASH_TOLERANCE = 0.1
#: Cached vs recomputed logits in fp32 (another kernel shape for the same sums). Measured on the CPU: 1.1e-7 to
#: 1.6e-6; decoding steps whose positions are off by one move them by 0.09 to 0.16.
CACHE_TOLERANCE = 1e-3
#: New tokens decoded per prompt.
STEPS = 6
#: All 2-D weights of the random model are multiplied by this: sharper attention, so positions matter more.
SHARPEN = 5.0
#: REPO predictor weights N(0, (gain / sqrt(fan_in))^2), so its positions spread over tens to hundreds.
REPO_SPREAD = {"gate_map": 4.0, "content_map": 4.0, "final_map": 1.0}


def flash_attn_installed() -> bool:
    """True when the flash-attn package can be imported (transformers' flash_attention_2 needs it)."""
    return importlib.util.find_spec("flash_attn") is not None


@contextmanager
def fp32_matmul() -> Iterator[None]:
    """float32 matmuls in full float32 (no TF32 on CUDA) inside the block, whatever the process had set."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@torch.no_grad()
def sharpen(model, factor: float):
    """`model` with every 2-D weight multiplied by `factor`: sharper attention and wider greedy margins."""
    for param in model.parameters():
        if param.dim() == 2:
            param.mul_(factor)
    return model


def tiny_model(position_method: str, seed: int = 0):
    """A random 4-layer OLMo-2 with `position_method` and the harness's byte tokenizer, sharpened (see SHARPEN)."""
    tokenizer = byte_tokenizer()
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, position_method=position_method)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = sharpen(RePoOlmo2ForCausalLM(config).eval(), SHARPEN)
        with torch.no_grad():
            for name, module in model.named_modules():
                gain = REPO_SPREAD.get(name.rsplit(".", 1)[-1])
                if gain is not None:
                    module.weight.normal_(0.0, gain / module.weight.shape[1] ** 0.5)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def check_prompts(tokenizer) -> list:
    """Two MDQA-format prompts (3 and 2 documents, so one is left-padded), tokenised with their document spans."""
    topics = ("rivers", "mountains", "volcanoes", "glaciers")
    built = []
    for row, (documents, question) in enumerate(((3, "what is document 2 about?"), (2, "which one?"))):
        passages = [Passage(f"Topic {row}{j}", f"A short passage on {topics[(row + j) % 4]}, number {j}.")
                    for j in range(documents)]  # fmt: skip
        built.append(build_mdqa_prompt(question, passages))
    return tokenize_prompts(tokenizer, [prompt for prompt, _ in built], [spans for _, spans in built])


def lpes_scale_file(workdir: Path, num_layers: int) -> Path:
    """A hand-made LPES scale file (scales 1 ... 2.5 over the layers), as `lpes:scale_file=` reads it."""
    scales = [1.0 + 1.5 * layer / max(1, num_layers - 1) for layer in range(num_layers)]
    return write_json_atomic(
        Path(workdir) / "check-gpu-scales.json", {"format_version": 1, "num_layers": num_layers, "scales": scales}
    )


def method_stack(case: MethodCase, workdir: Path, config) -> MethodStack:
    """The case's method stack for a model of `config`: `{scale_file}` becomes a scale file written into `workdir`
    (lpes), `{vocab_size}` the model's vocabulary size (pcd's gamma)."""
    spec = case.spec
    if "{scale_file}" in spec:
        spec = spec.replace("{scale_file}", str(lpes_scale_file(workdir, config.num_hidden_layers)))
    return MethodStack.parse(spec.replace("{vocab_size}", str(config.vocab_size)))


@dataclass
class StepLogits(Method):
    """Keeps the logits every step hands on (after the methods before it), as float32 on the CPU. Not registered."""

    steps: list = field(default_factory=list, init=False)

    def process_logits(self, step, logits, state):
        self.steps.append(logits.detach().to("cpu", torch.float32))
        return logits


@dataclass
class Chooser(Method):
    """Makes greedy pick `tokens[:, step]` (the same sequence on every run), or without tokens any id but `banned`."""

    tokens: Any = None
    banned: tuple = ()

    def process_logits(self, step, logits, state):
        if self.tokens is None:
            banned = torch.tensor(self.banned, dtype=torch.long, device=logits.device)
            return logits.index_fill(-1, banned, -math.inf)
        chosen = self.tokens[:, step : step + 1].to(logits.device)
        return torch.full_like(logits, -math.inf).scatter(-1, chosen, 0.0)


@dataclass
class Decoded:
    """The logits `[steps, B, V]` (float32, CPU) the harness decoded with, and the tokens `[B, steps]` it chose."""

    logits: torch.Tensor
    tokens: torch.Tensor


def decode(model, tokenizer, prompts, stack, tokens: torch.Tensor | None = None, steps: int = STEPS) -> Decoded:
    """Greedy decoding of `prompts` by the harness with `stack` (attached by the caller), `steps` tokens per row.

    With `tokens` every step is forced to them; without, EOS and padding are
    never chosen, so every row runs all steps.
    """
    recorder = StepLogits()
    banned = tuple(sorted({tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}))
    chooser = Chooser(tokens=tokens, banned=banned)
    batch = collate(prompts, tokenizer.pad_token_id, model.device)
    outputs = generate_batch(
        model, tokenizer, batch, DecodeSettings(max_new_tokens=steps, batch_size=len(prompts)),
        MethodStack([*stack.methods, recorder, chooser]),
    )  # fmt: skip
    chosen = torch.tensor([output.token_ids for output in outputs], dtype=torch.long)
    return Decoded(torch.stack(recorder.steps), chosen)


def on_device(model, device: str, dtype: torch.dtype, attn_implementation: str = "sdpa"):
    """A copy of `model` on `device` in `dtype` with the given attention kernel (the original stays as it is)."""
    moved = copy.deepcopy(model).to(device=device, dtype=dtype)
    if attn_implementation != moved.config._attn_implementation:
        moved.set_attn_implementation(attn_implementation)
    return moved.eval()


def reference_decoding(case: MethodCase, model, tokenizer, prompts, workdir: Path) -> Decoded:
    """fp32 on the CPU, tokens chosen freely: what the other runs are compared against."""
    stack = method_stack(case, workdir, model.config)
    cpu = on_device(model, "cpu", torch.float32)
    with fp32_matmul(), stack.attached(cpu, tokenizer):
        return decode(cpu, tokenizer, prompts, stack)


def forced_decoding(case, model, tokenizer, prompts, workdir, reference: Decoded) -> Decoded:
    """`model` (already placed) decoding the reference's tokens with the case's stack."""
    stack = method_stack(case, workdir, model.config)
    with stack.attached(model, tokenizer):
        return decode(model, tokenizer, prompts, stack, reference.tokens)


def precision_row(case, model, tokenizer, prompts, workdir, reference: Decoded, device: str, dtype=torch.bfloat16):
    """`model` in `dtype` on `device` vs the fp32 CPU reference, every step's logits (BF16_TOLERANCE)."""
    placed = on_device(model, device, dtype)
    drift = relative_difference(forced_decoding(case, placed, tokenizer, prompts, workdir, reference).logits,
                                reference.logits)  # fmt: skip
    kind = str(dtype).removeprefix("torch.").replace("bfloat16", "bf16").replace("float32", "fp32")
    return within(f"{case.name}: {kind} {device} vs fp32 cpu", drift, BF16_TOLERANCE, f"logits of {STEPS} steps")


def flash_row(case, model, tokenizer, prompts, workdir, reference: Decoded, device: str) -> Row:
    """flash_attention_2 vs sdpa, bf16 on `device`, the reference's tokens (FLASH_TOLERANCE); a skip when n/a."""
    name = f"{case.name}: flash_attention_2 vs sdpa"
    if not flash_attn_installed():
        return skip(name, "flash-attn not installed (pip install flash-attn): flash_attention_2 not checked")
    if case.no_flash:
        return skip(name, f"not applicable: {case.no_flash}")
    runs = {}
    for kernel in ("sdpa", "flash_attention_2"):
        placed = on_device(model, device, torch.bfloat16, kernel)
        runs[kernel] = forced_decoding(case, placed, tokenizer, prompts, workdir, reference).logits
    drift = relative_difference(runs["flash_attention_2"], runs["sdpa"])
    return within(name, drift, FLASH_TOLERANCE, f"bf16 on {device}, logits of {STEPS} steps", unit="of max |sdpa|")


def cache_row(case, model, tokenizer, prompts, workdir, device: str) -> Row:
    """Cached decoding vs recomputation in fp32 on `device` (CACHE_TOLERANCE)."""
    placed = on_device(model, device, torch.float32)
    stack = method_stack(case, workdir, model.config)
    with fp32_matmul(), stack.attached(placed, tokenizer):
        cached = decode(placed, tokenizer, prompts, stack)
        recomputed = recompute(case, placed, tokenizer, prompts, stack, cached)
    drift = relative_difference(cached.logits, recomputed)
    note = f"fp32 on {device}, {STEPS} steps, recomputed by {case.recompute}"
    return within(f"{case.name}: kv-cache vs recompute", drift, CACHE_TOLERANCE, note, unit="of max |recomputed|")


@torch.no_grad()
def recompute(case: MethodCase, model, tokenizer, prompts, stack, cached: Decoded) -> torch.Tensor:
    """The logits `[steps, B, V]` of `cached`'s steps without a KV cache (`stack` still attached)."""
    tokens, steps = cached.tokens, cached.tokens.shape[1]
    if case.recompute == "prefill":  # the harness prefills prompt + the first t tokens and takes its first step
        out = []
        for t in range(steps):
            longer = [TokenizedPrompt(p.input_ids + tuple(tokens[row, :t].tolist()), p.item_spans)
                      for row, p in enumerate(prompts)]  # fmt: skip
            out.append(decode(model, tokenizer, longer, stack, tokens[:, t : t + 1], steps=1).logits[0])
        return torch.stack(out)
    batch = collate(prompts, tokenizer.pad_token_id, model.device)
    following = tokens[:, : steps - 1].to(model.device)
    ids = torch.cat([batch.input_ids, following], dim=1)
    mask = torch.cat([batch.attention_mask, torch.ones_like(following)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    if case.recompute == "fim":
        _request_fim_edit(model, stack.methods[0], batch, rows=steps)
    if case.recompute == "rows":
        stack.methods[0].set_prefill_rows(steps)
    try:
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -steps:]
    finally:
        if case.recompute == "fim":
            probe_of(model).clear()
        if case.recompute == "rows":
            stack.methods[0].set_prefill_rows(None)
    return logits.to("cpu", torch.float32).transpose(0, 1)


def _request_fim_edit(model, fim, batch, rows: int) -> None:
    """Found-in-the-Middle's edit, with the calibration of the cached run, on the last `rows` query rows."""
    index = document_index(batch.item_token_spans, batch.input_ids.shape[1]).to(model.device)
    alpha = fim.last_calibration.alpha.to(model.device)
    layers = resolve_layers(fim.layers, len(attention_modules(model)))
    probe_of(model).request(
        edit=lambda layer, w: redistribute(w, index, alpha, fim.target), edit_layers=layers, query_rows=rows
    )


def case_rows(case: MethodCase, device: str, workdir: Path, loaded=None) -> list[Row]:
    """The three rows of one method: bf16 vs fp32 cpu, kv-cache vs recompute, flash vs sdpa.

    `loaded` = (model, tokenizer) to check instead of the tiny random model of the case's position method."""
    model, tokenizer = loaded if loaded is not None else tiny_model(case.position_method)
    prompts = check_prompts(tokenizer)
    reference = reference_decoding(case, model, tokenizer, prompts, workdir)
    rows = guarded(f"{case.name}: bf16 {device} vs fp32 cpu",
                   lambda: [precision_row(case, model, tokenizer, prompts, workdir, reference, device)])  # fmt: skip
    rows += guarded(f"{case.name}: kv-cache vs recompute",
                    lambda: [cache_row(case, model, tokenizer, prompts, workdir, device)])  # fmt: skip
    rows += guarded(f"{case.name}: flash_attention_2 vs sdpa",
                    lambda: [flash_row(case, model, tokenizer, prompts, workdir, reference, device)])  # fmt: skip
    return rows


def position_method_rows(device: str, workdir: Path, names: tuple[str, ...] = CASE_NAMES) -> list[Row]:
    """`case_rows` of every method named (all by default); a method that fails to set up is one failed row."""
    unknown = sorted(set(names) - set(CASE_NAMES))
    if unknown:
        raise ValueError(f"unknown position method(s) {unknown}; choose from {list(CASE_NAMES)}")
    rows = []
    for case in CASES:
        if case.name in names:
            rows += guarded(f"{case.name}: set-up", lambda case=case: case_rows(case, device, Path(workdir)))
    return rows


def real_model_rows(device: str, workdir: Path, model_dir: str | Path = DEFAULT_OUT,
                    names: tuple[str, ...] = CASE_NAMES) -> list[Row]:  # fmt: skip
    """The three rows of every evaluation method (those on a RoPE model) on the real pretrained model: 30 layers
    of trained weights and GQA, where the tiny random model has 4 random layers. A missing model is a skip row."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        return [skip("real model", f"no model at {model_dir}: make it with python -m repo_train real-model")]
    model, tokenizer = load_model(model_dir)
    name = model_dir.name
    rows = []
    for case in CASES:
        if case.name in names and case.position_method == "rope":
            renamed = dataclasses.replace(case, name=f"{name} {case.name}")
            rows += guarded(f"{renamed.name}: set-up",
                            lambda c=renamed: case_rows(c, device, Path(workdir), (model, tokenizer)))  # fmt: skip
    return rows
