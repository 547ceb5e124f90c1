#!/usr/bin/env python
"""Cost of each training-free method against the baseline, side by side in one run.

Builds a random OLMo-2 (byte tokenizer, RoPE base 10,000) and MDQA-style
prompts with document spans, then per round times the baseline and each method
back to back on the same batches (baseline, method, baseline, method, ...), so
both see the same machine state. Prints two time ratios per method: the median
of the per-round ratios (with their range) and the ratio of the best (minimum)
times, which is the one least disturbed by other jobs on a shared machine and
the one PCD is held to its 2.1x target with.

Memory, two measures:
- K/V bytes: exact bytes of every KV cache a method holds at the end of a
  batch (the harness's and any side caches), summed over batches;
- peak RSS growth: in a fresh subprocess per method (glibc told to return
  large blocks, `MALLOC_MMAP_THRESHOLD_`), the process's peak resident memory
  during generation minus its resident memory just before (Linux VmHWM, reset
  through /proc/self/clear_refs). tracemalloc is not used: torch's CPU tensors
  are not allocated through Python's allocator, so it would not see them, and
  torch keeps no allocator statistics on CPU.

    python scripts/benchmark_calibrators.py --prompts 8 --docs 10 --new-tokens 16 --rounds 3
"""

# No `from __future__ import annotations`: with string annotations, making the `CacheBytes` dataclass needs
# this module in sys.modules, which a file loaded by path (tests/script_loader.py) is not.
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from jsonargparse.typing import PositiveInt

# The checkout's packages, also when an older editable install does not list `evaluation` yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.generation import DecodeSettings, collate, generate_batch, plan_batches, tokenize_prompts
from evaluation.methods import Method, MethodStack
from evaluation.models import byte_tokenizer
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_train.config_cli import ConfigParser, parse_script
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from repo_train.scripting.benchmarking import alternate

DEFAULT_METHODS = [
    "caliope:calibrator=hourglass",
    "caliope:calibrator=moses",
    "caliope:calibrator=decay",
    "pcd",
    "ms_poe",
    "attention_buckets",
    "pi:scale=2",
]
PCD_TARGET = 2.1
WORDS = ("the", "of", "and", "river", "city", "year", "king", "war", "music", "film", "north", "old", "new", "great")


@dataclass
class CacheBytes(Method):
    """Adds up, at the end of each batch, the bytes of every KV cache in the generation state."""

    name: ClassVar[str] = "cache_bytes"
    total: int = field(default=0, init=False)

    def finish(self, state):
        caches = [state.past_key_values]
        for scratch in state.scratch.values():
            for value in scratch.values():
                for item in value if isinstance(value, list) else [value]:
                    caches.append(getattr(item, "cache", None))
        for cache in caches:
            for layer in getattr(cache, "layers", None) or []:
                for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                    if isinstance(tensor, torch.Tensor):
                        self.total += tensor.numel() * tensor.element_size()


def build(args):
    """Model, tokenizer and the collated batches every method runs on (seeded: the same in every process)."""
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
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1
    rng = random.Random(0)
    texts, spans = [], []
    for _ in range(args.prompts):
        docs = [
            Passage(rng.choice(WORDS).title(), " ".join(rng.choice(WORDS) for _ in range(args.doc_words)))
            for _ in range(args.docs)
        ]
        prompt, item_spans = build_mdqa_prompt("who built the " + rng.choice(WORDS) + "?", docs)
        texts.append(prompt)
        spans.append(item_spans)
    prompts = tokenize_prompts(tokenizer, texts, spans)
    plan = plan_batches([len(p.input_ids) for p in prompts], args.batch_size)
    batches = [collate([prompts[i] for i in indices], tokenizer.pad_token_id) for indices in plan]
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    # No EOS (an id that never occurs): every method generates exactly new_tokens per row.
    model.generation_config.eos_token_id = -1
    return model, tokenizer, batches, settings, [len(p.input_ids) for p in prompts]


def timed(model, tokenizer, batches, settings, spec: str | None) -> tuple[float, int]:
    """Seconds to generate all batches with a method stack (None = baseline), and its K/V bytes."""
    probe = CacheBytes()
    stack = MethodStack([*(MethodStack.parse(spec).methods if spec else []), probe])
    with stack.attached(model, tokenizer):
        start = time.perf_counter()
        for batch in batches:
            generate_batch(model, tokenizer, batch, settings, stack)
        return time.perf_counter() - start, probe.total


def _status_kib(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def memory_child(args) -> None:
    """Print the peak RSS growth (KiB) of one generation pass with `args.child` (run in a fresh process)."""
    model, tokenizer, batches, settings, _ = build(args)
    spec = None if args.child == "baseline" else args.child
    timed(model, tokenizer, batches[-1:], settings, spec)  # warm-up: one-time allocations are not the method's
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    timed(model, tokenizer, batches, settings, spec)
    print(json.dumps({"peak_growth_kib": _status_kib("VmHWM") - before}))


def peak_growth(args, spec: str) -> int | None:
    command = [sys.executable, __file__, "--child", spec] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("child", "methods", "rounds")
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"  memory run of {spec} failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_growth_kib"]


PROG = "scripts/benchmark_calibrators.py"


def build_parser() -> ConfigParser:
    """The benchmark's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--methods", type=str, nargs="*", default=DEFAULT_METHODS, help="method specs to compare")
    parser.add_argument("--prompts", type=PositiveInt, default=8, help="MDQA-style prompts")
    parser.add_argument("--docs", type=PositiveInt, default=10, help="documents per prompt")
    parser.add_argument("--doc_words", "--doc-words", type=PositiveInt, default=12, help="words per document")
    parser.add_argument(
        "--new_tokens", "--new-tokens", type=PositiveInt, default=16, help="tokens generated per prompt"
    )
    parser.add_argument("--batch_size", "--batch-size", type=PositiveInt, default=4, help="prompts per batch")
    parser.add_argument("--hidden", type=PositiveInt, default=256, help="model width (FFN 4x)")
    parser.add_argument("--layers", type=PositiveInt, default=4, help="decoder layers")
    parser.add_argument("--heads", type=PositiveInt, default=4, help="attention heads")
    parser.add_argument("--rounds", type=PositiveInt, default=3, help="timed pairs per method (after one warm-up)")
    parser.add_argument("--threads", type=PositiveInt, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--child", type=str | None, default=None, help=argparse.SUPPRESS)  # a memory run's method
    return parser


def check_options(args: argparse.Namespace) -> None:
    """Every method spec parses, so a typo stops the run before the baseline is timed."""
    if not args.methods:
        raise ValueError("--methods: give at least one method spec, e.g. --methods pcd pi:scale=2")
    for spec in args.methods:
        MethodStack.parse(spec)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return parse_script(build_parser(), argv, check_options)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.child:
        memory_child(args)
        return

    model, tokenizer, batches, settings, lengths = build(args)
    print(
        f"d={args.hidden}, {args.layers} layers, {args.heads} heads; {args.prompts} prompts of {args.docs} documents "
        f"({min(lengths)}-{max(lengths)} tokens), {args.new_tokens} new tokens, batch {args.batch_size}, "
        f"{args.threads} threads, {args.rounds} rounds"
    )
    _, base_bytes = timed(model, tokenizer, batches, settings, None)  # warm-up
    base_peak = peak_growth(args, "baseline")
    header = f"{'method':<62} {'median ratio (range)':>22} {'best/best':>9} {'K/V ratio':>9} {'peak RSS':>8}"
    print(header)
    print(f"{'baseline':<62} {'1.000':>22} {'1.000':>9} {'1.00':>9} {'1.00':>8}   ({base_peak} KiB peak growth)")
    results = {}
    for spec in args.methods:
        timed(model, tokenizer, batches, settings, spec)  # warm-up (the baseline's was above)
        kv_bytes: list[int] = []

        def run_method(spec: str = spec, kv_bytes: list[int] = kv_bytes) -> float:  # bound now, not late
            seconds, size = timed(model, tokenizer, batches, settings, spec)
            kv_bytes.append(size)
            return seconds

        result = alternate(lambda: timed(model, tokenizer, batches, settings, None)[0], run_method, args.rounds)
        ratios, best, kv = result.ratios, result.best_ratio, kv_bytes[-1]
        results[spec] = best
        peak = peak_growth(args, spec)
        peak_ratio = f"{peak / base_peak:.2f}" if peak is not None and base_peak else "n/a"
        spread = f"{result.median_ratio:.3f} ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"{spec:<62} {spread:>22} {best:>9.3f} {kv / base_bytes:>9.2f} {peak_ratio:>8}   ({peak} KiB)")
    print(f"baseline best time: {min(result.a):.3f}s for {len(batches)} batches")
    for spec in [spec for spec in results if spec.split(":")[0] == "pcd"]:
        verdict = "within" if results[spec] <= PCD_TARGET else "ABOVE"
        print(f"PCD best time / baseline best time: {results[spec]:.3f} ({verdict} the {PCD_TARGET}x target)")


if __name__ == "__main__":
    main()
