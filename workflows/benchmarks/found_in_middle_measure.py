"""`python -m workflows benchmark-fim`'s measuring (workflows.benchmarks.found_in_middle: its options)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from evaluation.attention_probe import probing
from evaluation.generation import tokenize_prompts
from evaluation.methods import MethodStack
from evaluation.methods.decoding import DecodeSettings, collate, generate_batch
from evaluation.methods.found_in_middle import DUMMY_DOCUMENTS, calibrate_documents
from evaluation.model_loading import byte_tokenizer
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks.mdqa import MDQATask
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.benchmarking import alternate, summary
from workflows.benchmarks.found_in_middle import FimBenchmark

# The checkout's packages, also when an older editable install does not list `evaluation` yet.
FIXTURE = NQ_OPEN_ORACLE
FIM = "fim:temperature=5e-5,layers=last_half"
FIM_CHUNKED = FIM + ",calibration_batch=1"  # one calibration prompt per prefill: less memory, more time


def setup(args):
    """Model, tokenizer and one left-padded batch of MDQA prompts (gold in the middle)."""

    torch.manual_seed(0)
    tokenizer = byte_tokenizer()
    shape = dict(hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers)
    heads = dict(num_attention_heads=args.heads, num_key_value_heads=args.heads)
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, **heads, **shape)
    model = RePoOlmo2ForCausalLM(config).eval()
    # eos -1 never occurs: both configurations decode all new tokens
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, -1
    rows = MDQATask(
        path=str(FIXTURE), num_documents=args.docs, num_examples=args.examples, gold_positions=[args.docs // 2]
    ).build()
    prompts = tokenize_prompts(tokenizer, rows["prompt"], rows["item_spans"])
    batch = collate(prompts, tokenizer.pad_token_id)
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=len(prompts), stop_strings=())
    return model, tokenizer, batch, prompts, settings


def generate(model, tokenizer, batch, settings, spec: str) -> float:
    stack = MethodStack.parse(spec)
    with stack.attached(model, tokenizer):
        start = time.perf_counter()
        generate_batch(model, tokenizer, batch, settings, stack)
        return time.perf_counter() - start


def rss_mb() -> float:
    """Current resident set size (Linux /proc), MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def child(args: FimBenchmark, spec: str) -> None:
    """One configuration in a fresh process: its time and its peak RSS above the loaded state."""
    torch.set_num_threads(args.threads)
    model, tokenizer, batch, _, settings = setup(args)
    base = rss_mb()
    seconds = generate(model, tokenizer, batch, settings, spec)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    print(json.dumps({"seconds": seconds, "peak_above_load_mb": peak - base}))


def measure_in_child(args: FimBenchmark, spec: str) -> dict:
    """`child` in a fresh interpreter (this module run as a program), the options and the spec as JSON on its
    standard input."""
    request = json.dumps({"options": args.options(), "spec": spec})
    command = [sys.executable, "-m", __spec__.name]
    out = subprocess.run(command, input=request, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(args: FimBenchmark) -> None:
    """Fresh-process runs first, then the alternated timing, the calibration's parts and the probe's rows."""

    if args.threads is None:
        args.threads = torch.get_num_threads()  # the fresh processes get the same count
    # Fresh processes first, before this one holds a model and its activations.
    runs = {spec: measure_in_child(args, spec) for spec in ("baseline", FIM, FIM_CHUNKED)}

    torch.set_num_threads(args.threads)
    model, tokenizer, batch, prompts, settings = setup(args)
    width = batch.input_ids.shape[1]
    print(
        f"model: d={args.hidden}, {args.layers} layers, {args.heads} heads; batch B={len(prompts)}, "
        f"K={args.docs} documents, prompt width {width} tokens, {args.new_tokens} new tokens; {args.threads} threads"
    )

    result = alternate(
        lambda: generate(model, tokenizer, batch, settings, "baseline"),
        lambda: generate(model, tokenizer, batch, settings, FIM),
        args.rounds,
        warmup=1,
    )
    print("generation time:")
    print(textwrap.indent(summary(result, "baseline", "fim"), "  "))

    layers = list(range(args.layers))
    with torch.no_grad(), probing(model) as probe:
        start = time.perf_counter()
        model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids, logits_to_keep=1)
        prefill = time.perf_counter() - start
        slots = [DUMMY_DOCUMENTS["mdqa"].format(k=k + 1) for k in range(args.docs)]
        dummy = [[tokenizer(text)["input_ids"] for text in slots] for _ in prompts]
        start = time.perf_counter()
        calibrate_documents(model, probe, prompts, layers, tokenizer.pad_token_id, dummy)
        calibration = time.perf_counter() - start
        probe.request(record=layers)
        model(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids, logits_to_keep=1)
        kept = sum(row.numel() * row.element_size() for row in probe.rows.values())
    full = len(layers) * len(prompts) * args.heads * width * width * 4
    print(
        f"calibration prefill of B*(K+1)={len(prompts) * (args.docs + 1)} prompts: {calibration:.3f} s "
        f"= {calibration / prefill:.1f} x one prefill of the batch ({prefill:.3f} s, idle probe)"
    )
    print(
        f"probe rows kept for all {len(layers)} layers: {kept / 2**10:.1f} KiB; the L x L weights of "
        f"output_attentions would be {full / 2**20:.1f} MiB (ratio {full / kept:.0f} = prompt width)"
    )

    base = runs["baseline"]
    for spec, run in runs.items():
        print(
            f"one run in a fresh process, {spec}: {run['seconds']:.2f} s, peak RSS +{run['peak_above_load_mb']:.0f} MB"
            f" (ratios to baseline: time {run['seconds'] / base['seconds']:.2f}, "
            f"peak memory {run['peak_above_load_mb'] / base['peak_above_load_mb']:.2f})"
        )


if __name__ == "__main__":  # `measure_in_child`'s fresh process: its request on standard input
    _request = json.load(sys.stdin)
    child(FimBenchmark(**_request["options"]), _request["spec"])
