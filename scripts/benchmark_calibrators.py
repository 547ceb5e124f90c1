#!/usr/bin/env python
"""Cost of each training-free method against the baseline, side by side in one run: one table.

Builds a random OLMo-2 (byte tokenizer, RoPE base 10,000) and MDQA-style prompts with document spans at two
prompt lengths (`--short_doc_words` and `--doc_words` words per document), then per round times the baseline
and each method back to back on the same batches (baseline, method, baseline, method, ...; `--rounds` timed
rounds after one warm-up), so both see the same machine state. Per method and length it reports:

- decode time: from the end of step 0 (the prefill and every method's step-0 work) to the end of the batch,
  summed over batches; the ratio to the baseline's per round, median and range over the rounds;
- total time: the whole generation of every batch (cost per prompt), the same way;
- peak memory: in a fresh subprocess per method and length (glibc told to return large blocks,
  `MALLOC_MMAP_THRESHOLD_`), the peak resident memory during generation minus the resident memory just
  before (Linux VmHWM, reset through /proc/self/clear_refs): one run each, so no range. tracemalloc is not
  used: torch's CPU tensors are not allocated through Python's allocator, so it would not see them.

Amortised Found in the Middle reads a bias file this script estimates first, on calibration prompts of the
same template and lengths (other seeds): the one-off cost, printed on its own and not in the ratios.
`--model DIR` times a saved HF model instead of the random one (the real model's directory, from
`python -m repo_train real-model`): a copy's cost depends on how its K/V weighs against the weights, which a
4-layer toy does not show as a pretrained model does. Choose `--doc_words` for its tokenizer's lengths.
The table puts the papers' figures beside ours and checks the targets (`TARGETS`). Run it with
`OMP_NUM_THREADS=1 ... --threads 1` on a quiet machine.

    OMP_NUM_THREADS=1 python scripts/benchmark_calibrators.py --threads 1 --rounds 5
"""

# No `from __future__ import annotations`: with string annotations, making the `StepClock` dataclass needs
# this module in sys.modules, which a file loaded by path (tests/script_loader.py) is not.
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

from jsonargparse.typing import PositiveInt

# The checkout's packages, also when an older editable install does not list `evaluation` yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.methods import METHODS, Method, MethodStack, build_method
from evaluation.methods.base import parse_method_spec, split_stack_spec
from evaluation.tasks.mdqa import Passage, build_mdqa_prompt
from repo_common.atomic import write_json_atomic
from repo_common.config_cli import ConfigParser, parse_script

#: Where the amortised FiM spec takes the bias file this script makes.
BIAS_FILE = "{bias_file}"
AMORTISED_FIM = f"fim:calibration=amortised,bias_file={BIAS_FILE}"
#: Where the LPES spec takes the scale file this script writes (`LPES_SCALES`: a cost benchmark needs no search).
SCALE_FILE = "{scale_file}"
LPES = f"lpes:scale_file={SCALE_FILE}"
DEFAULT_METHODS = [
    "caliope:calibrator=hourglass",
    "caliope:calibrator=moses",
    "caliope:calibrator=decay",
    "pi:scale=2",
    "ms_poe",
    "pcd",
    "pcd:passes=sequential",
    "attention_buckets",
    "attention_buckets:passes=sequential",
    "fim",
    AMORTISED_FIM,
    LPES,
]
WORDS = ("the", "of", "and", "river", "city", "year", "king", "war", "music", "film", "north", "old", "new", "great")


class Target(NamedTuple):
    """A cost a method must stay within: `measure` ('decode' or 'total') ratio <= `limit` at every length."""

    name: str
    measure: str
    limit: float


#: The papers' own statements of each method's cost, by method name (the spec's part before ':'), as
#: docs/methods/*.md cite them; "n/a" where no paper states one (positions-only methods).
PAPER_COST = {
    "attention_buckets": "4.8× (LPES, Table 4)",
    "pcd": "2 forwards a step (PCD)",
    "fim": "K extra prefills a prompt (FiM)",
    "ms_poe": "n/a",
    "caliope": "n/a",
    "pi": "n/a",
    "lpes": "n/a",
}
#: `--quick`: a smoke run of every method in seconds (the tests'): tiny shapes, one round, no memory runs.
QUICK = dict(
    prompts=2,
    docs=3,
    doc_words=4,
    short_doc_words=2,
    new_tokens=3,
    batch_size=2,
    hidden=32,
    layers=3,  # Ms-PoE edits layers 2 and up
    heads=2,
    rounds=1,
    calibration_prompts=1,
    skip_memory=True,
)
#: The targets of issue 25, by spec (the default specs of each method).
TARGETS = {
    "attention_buckets": Target("Attention Buckets (6 bases)", "decode", 3.0),
    "pcd": Target("PCD", "decode", 1.5),
    AMORTISED_FIM: Target("amortised Found in the Middle, after its one-off calibration", "total", 1.3),
}


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
    import torch  # lazy: --help answers without torch

    from evaluation.model_loading import byte_tokenizer, load_model  # lazy: --help answers without torch
    from repo_train.modeling import RePoOlmo2ForCausalLM
    from repo_train.modeling.presets import tiny

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
    from evaluation.generation import tokenize_prompts  # lazy: --help answers without torch

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
    from evaluation.generation import plan_batches  # lazy: --help answers without torch
    from evaluation.methods.decoding import collate

    prompts = build_prompts(tokenizer, args, doc_words, args.prompts, seed=0)
    plan = plan_batches([len(p.input_ids) for p in prompts], args.batch_size)
    batches = [collate([prompts[i] for i in indices], tokenizer.pad_token_id) for indices in plan]
    return batches, [len(p.input_ids) for p in prompts]


def make_bias_file(model, tokenizer, args, path: Path) -> float:
    """The amortised FiM's bias file, from `args.calibration_prompts` prompts per length (seeds 1, 2); seconds."""
    from evaluation.methods.fim_bias import write_bias_file  # lazy: --help answers without torch
    from evaluation.methods.found_in_middle import estimate_bias

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
    """The spec with this script's file placeholders replaced by the files it made."""
    return spec.replace(BIAS_FILE, str(bias_file)).replace(SCALE_FILE, str(scale_file))


def lengths(args) -> tuple[int, int]:
    return args.short_doc_words, args.doc_words


def timed(model, tokenizer, batches, settings, spec: str | None) -> tuple[float, float]:
    """Seconds to generate all batches with a method stack (None = baseline), and the decode part of them."""
    from evaluation.methods.decoding import generate_batch  # lazy: --help answers without torch

    clock = StepClock()
    stack = MethodStack([*(MethodStack.parse(spec).methods if spec else []), clock])
    with stack.attached(model, tokenizer):
        start = time.perf_counter()
        for batch in batches:
            generate_batch(model, tokenizer, batch, settings, stack)
        return time.perf_counter() - start, clock.decode


def _status_kib(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def memory_child(args) -> None:
    """Print the peak RSS growth (KiB) of one generation pass with `args.child` (run in a fresh process)."""
    from evaluation.methods.decoding import DecodeSettings  # lazy: --help answers without torch

    model, tokenizer = build_model(args)
    batches, _ = build_batches(tokenizer, args, args.child_words)
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=args.batch_size)
    spec = None if args.child == "baseline" else args.child
    timed(model, tokenizer, batches[-1:], settings, spec)  # warm-up: one-time allocations are not the method's
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    timed(model, tokenizer, batches, settings, spec)
    print(json.dumps({"peak_growth_kib": _status_kib("VmHWM") - before}))


def peak_growth(args, spec: str, words: int) -> int | None:
    skip = ("child", "child_words", "methods", "rounds", "calibration_prompts", "skip_memory", "quick")
    command = [sys.executable, __file__, "--child", spec, "--child_words", str(words)] + [
        f"--{k}={v}" for k, v in vars(args).items() if k not in skip and v is not None
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"  memory run of {spec} failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_growth_kib"]


@dataclass
class Cell:
    """One method at one length: per-round ratios to the baseline and the peak memory ratio."""

    decode: list[float]
    total: list[float]
    memory: float | None


def spread(ratios: list[float]) -> str:
    """`median (min–max)`."""
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"


def target_verdict(spec: str, cells: list[Cell]) -> str:
    """'≤ 3.0× decode: met' when the median ratio meets the target at every length, '–' for untargeted specs."""
    target = TARGETS.get(spec)
    if target is None:
        return "–"
    medians = [statistics.median(getattr(cell, target.measure)) for cell in cells]
    verdict = "met" if all(m <= target.limit for m in medians) else "missed"
    return f"≤ {target.limit:g}× {target.measure}: {verdict}"


def target_lines(results: dict[str, list[Cell]], token_lengths: list[str]) -> list[str]:
    """One line per target of issue 25: the medians (ranges) at each length and met/missed; 'not run' when the
    run left its spec out."""
    lines = []
    for spec, target in TARGETS.items():
        name = target.name
        if spec not in results:
            lines.append(f"target {name}: {target.measure} ≤ {target.limit:g}× the baseline: not run")
            continue
        measured = ", ".join(
            f"{spread(getattr(cell, target.measure))} at {length}" for cell, length in zip(results[spec], token_lengths)
        )
        verdict = target_verdict(spec, results[spec]).rsplit(": ", 1)[1]
        lines.append(f"target {name}: {target.measure} ≤ {target.limit:g}× the baseline: {measured}: {verdict}")
    return lines


def coverage_line(specs, registered=None) -> str:
    """Which registered methods (`METHODS` unless given) the run left out (the default list has every one)."""
    registered = set(METHODS if registered is None else registered) - {"baseline"}
    missing = sorted(registered - {spec.split(":")[0] for spec in specs})
    if not missing:
        return f"every registered method is in the table ({len(registered)} besides the baseline)"
    return f"registered methods not in this run: {', '.join(missing)}"


def label(spec: str) -> str:
    """A spec as the table shows it: the script's file placeholders as FILE."""
    return spec.replace(BIAS_FILE, "FILE").replace(SCALE_FILE, "FILE")


def table(results: dict[str, list[Cell]], token_lengths: list[str]) -> list[str]:
    """The benchmark's one table (Markdown): per method, decode / total / peak-memory ratios at each length."""
    short, long = token_lengths
    header = (
        f"| method | paper's cost | decode × ({short}) | decode × ({long}) | total × ({short}) | total × ({long}) | "
        f"peak mem × ({short}) | peak mem × ({long}) | target |"
    )
    lines = [header, "|" + "---|" * 9]
    for spec, cells in results.items():
        shown = label(spec).replace("|", "\\|")  # a bare '|' would split the Markdown cell
        memory = [f"{c.memory:.2f}" if c.memory is not None else "n/a" for c in cells]
        paper = "n/a (ours)" if "calibration=amortised" in spec else PAPER_COST.get(spec.split(":")[0], "n/a")
        decode, total = [spread(c.decode) for c in cells], [spread(c.total) for c in cells]
        lines.append(
            f"| {shown} | {paper} | {' | '.join(decode)} | {' | '.join(total)} | {' | '.join(memory)} | "
            f"{target_verdict(spec, cells)} |"
        )
    return lines


PROG = "scripts/benchmark_calibrators.py"


def build_parser() -> ConfigParser:
    """The benchmark's options (each also a key of a `--config` file; the old dashed spellings work too)."""
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--methods", type=str, nargs="*", default=DEFAULT_METHODS, help="method specs to compare")
    parser.add_argument("--prompts", type=PositiveInt, default=8, help="MDQA-style prompts per length")
    parser.add_argument("--docs", type=PositiveInt, default=10, help="documents per prompt")
    parser.add_argument("--doc_words", "--doc-words", type=PositiveInt, default=12, help="words per document (long)")
    parser.add_argument(
        "--short_doc_words", "--short-doc-words", type=PositiveInt, default=3, help="words per document (short)"
    )
    parser.add_argument(
        "--new_tokens", "--new-tokens", type=PositiveInt, default=16, help="tokens generated per prompt"
    )
    parser.add_argument("--batch_size", "--batch-size", type=PositiveInt, default=4, help="prompts per batch")
    parser.add_argument(
        "--model",
        type=str | None,
        default=None,
        help="a local HF model directory to time instead of the random OLMo-2 (e.g. the real model's, from "
        "`python -m repo_train real-model`); --hidden, --layers and --heads then do not apply",
    )
    parser.add_argument("--hidden", type=PositiveInt, default=256, help="model width (FFN 4x)")
    parser.add_argument("--layers", type=PositiveInt, default=4, help="decoder layers")
    parser.add_argument("--heads", type=PositiveInt, default=4, help="attention heads")
    parser.add_argument("--rounds", type=PositiveInt, default=5, help="timed pairs per method (after one warm-up)")
    parser.add_argument(
        "--calibration_prompts", "--calibration-prompts", type=PositiveInt, default=8, help="amortised FiM, per length"
    )
    parser.add_argument("--skip_memory", "--skip-memory", type=bool, default=False, help="no peak-memory runs")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of every method in seconds: tiny model and prompts, 1 round, no memory runs "
        "(sets those options; its ratios mean nothing)",
    )
    parser.add_argument(
        "--threads", type=PositiveInt | None, default=None, help="torch threads (default: torch's own count)"
    )
    parser.add_argument("--child", type=str | None, default=None, help=argparse.SUPPRESS)  # a memory run's method
    parser.add_argument("--child_words", type=int, default=0, help=argparse.SUPPRESS)  # ... and its length
    return parser


def check_options(args: argparse.Namespace) -> None:
    """Every method spec reads as registered names, so a typo stops the run before the baseline is timed (their
    parameters: `check_method_parameters`, after `--print_config`); `--quick` sets its sizes."""
    if args.quick:
        vars(args).update(QUICK)
    if not args.methods:
        raise ValueError("--methods: give at least one method spec, e.g. --methods pcd pi:scale=2")
    for spec in args.methods:
        parts = split_stack_spec(spec)
        if not parts:
            raise ValueError("empty method spec; use e.g. 'baseline' or 'pi:scale=2'")
        for name in (parse_method_spec(part)[0] for part in parts):
            if name not in METHODS:  # the registry's names: no method module (torch) is loaded
                raise ValueError(f"unknown method {name!r}; registered methods are {sorted(METHODS)}")


def check_method_parameters(parser: ConfigParser, args: argparse.Namespace) -> None:
    """Every spec builds (its parameters' names and types), once the options are parsed: this loads the methods'
    modules (torch), which `--help` and `--print_config` do without. A bad one is a parser error, one line and exit
    code 2, as the other checks'."""
    try:
        _build_specs(args)
    except ValueError as err:
        parser.fail(str(err))


def model_layers(args: argparse.Namespace) -> int:
    """The timed model's decoder layers: `--layers`, or `--model`'s config.json (read without torch)."""
    if args.model is None:
        return args.layers
    from repo_common.model_directory import check_model_directory, read_model_config  # lazy: --model only

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


def _build_specs(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        scale_file = Path(scratch) / "lpes-scales.json"
        write_lpes_scales(scale_file, model_layers(args))
        for spec in args.methods:
            MethodStack.parse(spec.replace(SCALE_FILE, str(scale_file)))  # the bias file is read at attach


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    parser = build_parser()
    args = parse_script(parser, argv, check_options)
    check_method_parameters(parser, args)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch  # lazy: --help answers without torch

    from evaluation.methods.decoding import DecodeSettings  # lazy: --help answers without torch

    if args.threads is None:
        args.threads = torch.get_num_threads()  # the memory runs get the same count, and the table names it
    torch.set_num_threads(args.threads)
    if args.child:
        memory_child(args)
        return

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


if __name__ == "__main__":
    main()
