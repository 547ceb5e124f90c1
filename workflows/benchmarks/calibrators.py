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
    python -m workflows benchmark-calibrators --methods pcd --methods pi:scale=2 --quick true   # a smoke run
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import NamedTuple

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from evaluation.methods import METHODS
from evaluation.methods.base import parse_method_spec, split_stack_spec
from repo_common.config_cli import ConfigParser
from workflows.benchmarks.options import RandomModelOptions, declare, measured

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
    # layers 1-2 fit every model this benchmark builds (--quick has 3 layers): half of the default 4
    "positional_hidden:dims=2,layers=1-2,factor=0",
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
    "positional_hidden": "n/a",
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


@dataclass
class CalibratorsBenchmark(RandomModelOptions):
    """The benchmark's options (each also a key of a `--config` file), judged when built: every method spec reads
    as registered names, so a typo stops the run before the baseline is timed (their parameters:
    `calibrators_measure.build_specs`); `--quick true` sets its sizes."""

    rounds: PositiveInt = 5
    """timed pairs per method (after one warm-up)"""
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    """method specs to compare (a list, or one spec per --methods)"""
    prompts: PositiveInt = 8
    """MDQA-style prompts per length"""
    docs: PositiveInt = 10
    """documents per prompt"""
    doc_words: PositiveInt = 12
    """words per document (long)"""
    short_doc_words: PositiveInt = 3
    """words per document (short)"""
    new_tokens: PositiveInt = 16
    """tokens generated per prompt"""
    batch_size: PositiveInt = 4
    """prompts per batch"""
    model: str | None = None
    """a local HF model directory to time instead of the random OLMo-2 (e.g. the real model's, from `python -m
    repo_train real-model`); --hidden, --layers and --heads then do not apply"""
    calibration_prompts: PositiveInt = 8
    """amortised FiM, per length"""
    skip_memory: bool = False
    """no peak-memory runs"""
    quick: bool = False
    """a smoke run of every method in seconds: tiny model and prompts, 1 round, no memory runs (sets those
    options; its ratios mean nothing)"""

    def __post_init__(self) -> None:
        if self.quick:
            vars(self).update(QUICK)
        if not self.methods:
            raise ValueError("--methods: give at least one method spec, e.g. --methods pcd --methods pi:scale=2")
        for spec in self.methods:
            parts = split_stack_spec(spec)
            if not parts:
                raise ValueError("empty method spec; use e.g. 'baseline' or 'pi:scale=2'")
            for name in (parse_method_spec(part)[0] for part in parts):
                METHODS.check_name(name)  # the registry's names: no method module (torch) is loaded


OPTIONS = CalibratorsBenchmark


def add_arguments(parser: ConfigParser) -> None:
    declare(parser, CalibratorsBenchmark, __doc__)
    parser.repeatable = ("methods",)


def run(options: Namespace, parser: ConfigParser) -> int:
    """The options built and judged, then every spec built (loads the methods' modules: a bad parameter is a
    ValueError, one line and exit code 2, as the other checks'), then the measuring."""
    return measured(options, CalibratorsBenchmark, f"{MEASURE}:main")
