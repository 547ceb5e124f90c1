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

Amortised Found in the Middle reads a bias file this benchmark estimates first, on calibration prompts of the
same template and lengths (other seeds): the one-off cost, printed on its own and not in the ratios.
`--model DIR` times a saved HF model instead of the random one (the real model's directory, from
`python -m repo_train real-model`): a copy's cost depends on how its K/V weighs against the weights, which a
4-layer toy does not show as a pretrained model does. Choose `--doc_words` for its tokenizer's lengths.
The table puts the papers' figures beside ours and checks the targets (`TARGETS`). Run it with
`OMP_NUM_THREADS=1 ... --threads 1` on a quiet machine.

    OMP_NUM_THREADS=1 python -m workflows benchmark-calibrators --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from evaluation.methods import METHODS
from evaluation.methods.base import parse_method_spec, split_stack_spec
from repo_common.config_cli import ConfigParser, deferred, script_options

PROG = "python -m workflows benchmark-calibrators"
#: The measuring (torch, the models): imported once the options are checked.
MEASURE = "workflows.benchmarks.calibrators_measure"
#: Where the amortised FiM spec takes the bias file this benchmark makes.
BIAS_FILE = "{bias_file}"
AMORTISED_FIM = f"fim:calibration=amortised,bias_file={BIAS_FILE}"
#: Where the LPES spec takes the scale file this benchmark writes (`LPES_SCALES`: a cost benchmark needs no search).
SCALE_FILE = "{scale_file}"
LPES = f"lpes:scale_file={SCALE_FILE}"
DEFAULT_METHODS = [
    "caliope:calibrator=hourglass",
    "caliope:calibrator=moses",
    "caliope:calibrator=decay",
    "pi:scale=2",
    "ms_poe",
    "string",
    "pcd",
    "pcd:passes=sequential",
    "attention_buckets",
    "attention_buckets:passes=sequential",
    "fim",
    AMORTISED_FIM,
    LPES,
]


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
    "string": "2 attention passes (STRING)",
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
    """A spec as the table shows it: the benchmark's file placeholders as FILE."""
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


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--methods", type=str, nargs="*", default=DEFAULT_METHODS, help="method specs to compare")
    parser.add_argument("--prompts", type=PositiveInt, default=8, help="MDQA-style prompts per length")
    parser.add_argument("--docs", type=PositiveInt, default=10, help="documents per prompt")
    parser.add_argument("--doc_words", type=PositiveInt, default=12, help="words per document (long)")
    parser.add_argument("--short_doc_words", type=PositiveInt, default=3, help="words per document (short)")
    parser.add_argument("--new_tokens", type=PositiveInt, default=16, help="tokens generated per prompt")
    parser.add_argument("--batch_size", type=PositiveInt, default=4, help="prompts per batch")
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
    parser.add_argument("--calibration_prompts", type=PositiveInt, default=8, help="amortised FiM, per length")
    parser.add_argument("--skip_memory", type=bool, default=False, help="no peak-memory runs")
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


def check_options(args: argparse.Namespace) -> None:
    """Every method spec reads as registered names, so a typo stops the run before the baseline is timed (their
    parameters: `calibrators_measure.build_specs`, after `--print_config`); `--quick` sets its sizes."""
    if args.quick:
        vars(args).update(QUICK)
    if not args.methods:
        raise ValueError("--methods: give at least one method spec, e.g. --methods pcd pi:scale=2")
    for spec in args.methods:
        parts = split_stack_spec(spec)
        if not parts:
            raise ValueError("empty method spec; use e.g. 'baseline' or 'pi:scale=2'")
        for name in (parse_method_spec(part)[0] for part in parts):
            METHODS.check_name(name)  # the registry's names: no method module (torch) is loaded


def run(options: Namespace, parser: ConfigParser) -> int:
    """The checked options, then every spec built (loads the methods' modules: a bad parameter is a parser error,
    one line and exit code 2, as the other checks'), then the measuring."""
    args = script_options(parser, options, check_options)
    try:
        deferred(MEASURE, "build_specs")(args)
    except ValueError as err:
        parser.fail(str(err))
    deferred(MEASURE, "main")(args)
    return 0
