"""`python -m workflows benchmark-calibrators`'s measuring (workflows.benchmarks.calibrators: its options and
table)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from evaluation.generation import plan_batches, tokenize_prompts
from evaluation.methods import Method, MethodStack, build_method
from evaluation.methods.decoding import DecodeSettings, collate, generate_batch
from evaluation.methods.fim_bias import write_bias_file
from evaluation.methods.found_in_middle import estimate_bias
from evaluation.model_loading import byte_tokenizer, load_model
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_common.atomic import write_json_atomic
from repo_common.model_directory import check_model_directory, read_model_config
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.benchmarks.calibrators import (
    BIAS_FILE,
    SCALE_FILE,
    CalibratorsBenchmark,
    Cell,
    coverage_line,
    spread,
    table,
    target_lines,
)

WORDS = ("the", "of", "and", "river", "city", "year", "king", "war", "music", "film", "north", "old", "new", "great")


@dataclass
class StepClock(Method):
    """Adds up, per batch, the seconds from the end of step 0 (after every method before it) to the batch's end."""

    name: ClassVar[str] = "step_clock"
    decode: float = field(default=0.0, init=False)
    started: float | None = field(default=None, init=False)

    def process_logits(self, step, logits, state):
        if step == 0:
            self.started = time.perf_counter()
        return logits

    def finish(self, state):
        if self.started is not None:
            self.decode += time.perf_counter() - self.started
            self.started = None


def build_model(args):
    """The random model and its tokenizer (seeded: the same in every process), or `--model`'s (fp32, SDPA)."""

    if args.model is not None:
        model, tokenizer = load_model(args.model)
        # No EOS (an id that never occurs): every method generates exactly new_tokens per row.
        model.generation_config.eos_token_id = -1
        return model, tokenizer
    torch.manual_seed(0)
    tokenizer = byte_tokenizer()
    shape = dict(
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
    )
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, max_position_embeddings=8192, **shape)
    model = RePoOlmo2ForCausalLM(config).eval()
    # No EOS (an id that never occurs): every method generates exactly new_tokens per row.
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, -1
    return model, tokenizer


def build_prompts(tokenizer, args, doc_words: int, count: int, seed: int):
    """`count` MDQA-style prompts of `args.docs` documents of `doc_words` words (seeded)."""
    rng = random.Random(seed)
    texts, spans = [], []
    for _ in range(count):
        docs = [
            Passage(rng.choice(WORDS).title(), " ".join(rng.choice(WORDS) for _ in range(doc_words)))
            for _ in range(args.docs)
        ]
        prompt, item_spans = build_mdqa_prompt("who built the " + rng.choice(WORDS) + "?", docs)
        texts.append(prompt)
        spans.append(item_spans)
    return tokenize_prompts(tokenizer, texts, spans)


def build_batches(tokenizer, args, doc_words: int):
    """The collated batches every method runs on at one length, and their prompts' token lengths."""
    prompts = build_prompts(tokenizer, args, doc_words, args.prompts, seed=0)
    plan = plan_batches([len(p.input_ids) for p in prompts], args.batch_size)
    batches = [collate([prompts[i] for i in indices], tokenizer.pad_token_id) for indices in plan]
    return batches, [len(p.input_ids) for p in prompts]


def make_bias_file(model, tokenizer, args, path: Path) -> float:
    """The amortised FiM's bias file, from `args.calibration_prompts` prompts per length (seeds 1, 2); seconds."""
    start = time.perf_counter()
    prompts = []
    for seed, words in enumerate(lengths(args), start=1):
        prompts += build_prompts(tokenizer, args, words, args.calibration_prompts, seed=seed)
    write_bias_file(path, estimate_bias(model, tokenizer, prompts, build_method("fim"), args.batch_size))
    return time.perf_counter() - start


def write_lpes_scales(path: Path, layers: int) -> None:
    """A scale file for the LPES spec: s_h from 1.0 in the first layer to 2.5 in the last (what a search could
    write; applying it costs the same whatever the scales)."""
    scales = [1.0 + 1.5 * layer / max(layers - 1, 1) for layer in range(layers)]
    write_json_atomic(path, {"format_version": 1, "num_layers": layers, "scales": scales})


def resolved(spec: str, bias_file: Path, scale_file: Path) -> str:
    """The spec with this benchmark's file placeholders replaced by the files it made."""
    return spec.replace(BIAS_FILE, str(bias_file)).replace(SCALE_FILE, str(scale_file))


def lengths(args) -> tuple[int, int]:
    return args.short_doc_words, args.doc_words


def timed(model, tokenizer, batches, settings, spec: str | None) -> tuple[float, float]:
    """Seconds to generate all batches with a method stack (None = baseline), and the decode part of them."""
    clock = StepClock()
    stack = MethodStack([*(MethodStack.parse(spec).methods if spec else []), clock])
    with stack.attached(model, tokenizer):
        start = time.perf_counter()
        for batch in batches:
            generate_batch(model, tokenizer, batch, settings, stack)
        return time.perf_counter() - start, clock.decode


def _status_kib(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def memory_child(args: CalibratorsBenchmark, spec: str, words: int) -> None:
    """Print the peak RSS growth (KiB) of one generation pass with `spec` at `words` words a document (run in a
    fresh process: `peak_growth`)."""
    torch.set_num_threads(args.threads)
    model, tokenizer = build_model(args)
    batches, _ = build_batches(tokenizer, args, words)
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    spec = None if spec == "baseline" else spec
    timed(model, tokenizer, batches[-1:], settings, spec)  # warm-up: one-time allocations are not the method's
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    timed(model, tokenizer, batches, settings, spec)
    print(json.dumps({"peak_growth_kib": _status_kib("VmHWM") - before}))


def peak_growth(args: CalibratorsBenchmark, spec: str, words: int) -> int | None:
    """`memory_child` in a fresh interpreter (this module run as a program), the options, the spec and the length
    as JSON on its standard input; its KiB, or None when it failed."""
    request = json.dumps({"options": args.options(), "spec": spec, "words": words})
    command = [sys.executable, "-m", __spec__.name]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, input=request, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"  memory run of {spec} failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_growth_kib"]


def model_layers(args: CalibratorsBenchmark) -> int:
    """The timed model's decoder layers: `--layers`, or `--model`'s config.json."""
    if args.model is None:
        return args.layers

    try:
        directory = check_model_directory("--model", args.model)
        if not (directory / "config.json").is_file():
            raise ValueError(f"--model {args.model} has no config.json; pass the folder save_pretrained wrote")
        layers = read_model_config(directory).get("num_hidden_layers")
    except OSError as err:  # missing or unreadable: one line, as the other checks'
        raise ValueError(str(err)) from err
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"--model {args.model}: its config.json states no num_hidden_layers; pass an HF decoder")
    return layers


def build_specs(args: CalibratorsBenchmark) -> None:
    """Every spec builds (its parameters' names and types), LPES's with a scale file of the timed model's layers."""
    with tempfile.TemporaryDirectory() as scratch:
        scale_file = Path(scratch) / "lpes-scales.json"
        write_lpes_scales(scale_file, model_layers(args))
        for spec in args.methods:
            MethodStack.parse(spec.replace(SCALE_FILE, str(scale_file)))  # the bias file is read at attach


def main(args: CalibratorsBenchmark) -> None:
    """Every spec built, the bias file if a spec needs one, then every method against the baseline at both
    lengths: the table."""
    build_specs(args)
    if args.threads is None:
        args.threads = torch.get_num_threads()  # the memory runs get the same count, and the table names it
    torch.set_num_threads(args.threads)

    model, tokenizer = build_model(args)
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as scratch:
        bias_path, scale_path = Path(scratch) / "fim-bias.json", Path(scratch) / "lpes-scales.json"
        write_lpes_scales(scale_path, model.config.num_hidden_layers)
        specs = {spec: resolved(spec, bias_path, scale_path) for spec in args.methods}
        if any(BIAS_FILE in spec for spec in specs):
            seconds = make_bias_file(model, tokenizer, args, bias_path)
            print(
                f"amortised FiM: bias file from {2 * args.calibration_prompts} calibration prompts in {seconds:.1f} s"
            )
        results: dict[str, list[Cell]] = {spec: [] for spec in specs}
        token_lengths = []
        for words in lengths(args):
            batches, prompt_lengths = build_batches(tokenizer, args, words)
            token_lengths.append(f"{min(prompt_lengths)}–{max(prompt_lengths)} tok")
            base_peak = None if args.skip_memory else peak_growth(args, "baseline", words)
            for spec, spec_with_files in specs.items():
                decode, total = [], []
                for index in range(1 + args.rounds):  # baseline, method, baseline, method, ...; the first untimed
                    base_total, base_decode = timed(model, tokenizer, batches, settings, None)
                    method_total, method_decode = timed(model, tokenizer, batches, settings, spec_with_files)
                    if index:
                        decode.append(method_decode / base_decode)
                        total.append(method_total / base_total)
                peak = None if args.skip_memory else peak_growth(args, spec_with_files, words)
                memory = peak / base_peak if peak is not None and base_peak else None
                results[spec].append(Cell(decode, total, memory))
                shown = f"{memory:.2f}" if memory is not None else "n/a"
                print(
                    f"  {words} words/document, {spec}: decode {spread(decode)}, total {spread(total)}, "
                    f"peak memory {shown}",
                    flush=True,
                )
    config = model.config
    shape = f"d={config.hidden_size}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads"
    if args.model is not None:
        shape = f"{args.model} ({shape}, {config.num_key_value_heads} KV heads)"
    print(
        f"\n{shape}; {args.prompts} prompts of {args.docs} documents "
        f"at {' and '.join(token_lengths)}, {args.new_tokens} new tokens, batch {args.batch_size}, {args.threads} "
        f"threads; ratios to the baseline: median (range) over {args.rounds} interleaved rounds; peak memory: RSS "
        "growth in a fresh process, one run\n"
    )
    print("\n".join(table(results, token_lengths)))
    print()
    print("\n".join([*target_lines(results, token_lengths), coverage_line(results)]))


if __name__ == "__main__":  # `peak_growth`'s fresh process: its request on standard input
    _request = json.load(sys.stdin)
    memory_child(CalibratorsBenchmark(**_request["options"]), _request["spec"], _request["words"])
