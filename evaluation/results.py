"""What an evaluation run writes, and the checks that read it back.

`OUT/records.jsonl`: one JSON object per (task, method, example row), appended
and flushed as produced, so a killed run loses at most the line being written
(`read_records` drops such a torn last line). `OUT/summary.json`: metrics per
(task, method), written atomically (temporary file + `os.replace`), versioned by
`format_version`; `load_summary` refuses a file of another version or with
missing keys, naming what is wrong. Version 2 (clustered statistics, sign-flip
p-values, curve shapes) replaced version 1 (row-level bootstrap); a version-1
summary is re-summarised from its records by `python -m evaluation summarize`.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.mcnemar import clustered_mcnemar
from evaluation.position_metrics import (
    accuracy_by_position,
    classify_shape,
    middle_and_edges,
    middle_and_edges_rows,
    middle_minus_edges_rows,
    summarize_positions,
    u_shape_rho_rows,
)
from evaluation.statistics import (
    DEFAULT_PERMUTATIONS,
    PositionTable,
    bootstrap_ci,
    check_bootstrap_args,
    cluster_bootstrap_curves,
    cluster_bootstrap_ratio,
    holm_adjust,
    paired_differences,
    percentile_interval,
    sign_flip_test,
    verdict,
)
from repo_common import atomic
from repo_common.json_files import JsonFileError, parse_json_text
from repo_common.run_lock import locked_directory

FORMAT_VERSION = 2
RECORDS_FILE = "records.jsonl"
SUMMARY_FILE = "summary.json"
BASELINE = "baseline"

RECORD_KEYS = (
    "id",
    "example_id",
    "task",
    "method",
    "gold_position",
    "num_positions",
    "prediction",
    "answers",
    "score",
    "prompt_tokens",
    "truncated",
)
SUMMARY_KEYS = ("format_version", "model", "methods", "tasks", "results", "bootstrap")
RESULT_KEYS = (
    "n",
    "n_examples",
    "accuracy",
    "accuracy_ci",
    "num_positions",
    "by_position",
    "shape",
    "rho",
    "rho_ci",
    "worst_position",
    "worst_accuracy",
    "middle_minus_edges",
    "middle_minus_edges_ci",
    "truncated",
    "vs_baseline",
)


#: The intervals a summary leaves out (None) when its group has one question: every resample is that question, so
#: the interval has zero width and says nothing about uncertainty (the shape, judged from intervals, too).
ONE_QUESTION_NO_INTERVAL = (
    "accuracy_ci",
    "rho_ci",
    "middle_minus_edges_ci",
    "middle_accuracy_ci",
    "edges_accuracy_ci",
)


class ResultsFormatError(ValueError):
    """A results file that does not follow this module's schema."""


def _clean(value: Any) -> Any:
    """NaN/inf -> None, recursively: strict JSON has no NaN (rho of a flat curve is undefined)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to `path` through a temporary file in the same directory and `os.replace`.

    A failed write (a full disk) is an OSError naming `path` (`repo_common.atomic.writing_to`).
    """
    atomic.write_json_atomic(path, _clean(data), indent=2, fsync=True)


#: The scores a record may hold, by the metric that made them: a task's metric gives 0..1 (the summary
#: calls their mean accuracy); `gold_loglik` a mean log-probability, never above 0.
SCORE_RANGES = {"gold_loglik": (-math.inf, 0.0)}
METRIC_SCORE_RANGE = (0.0, 1.0)
#: Rounding slack on a range's ends (a log-probability computed as exactly 0 may come out as 1e-9).
SCORE_SLACK = 1e-6


def validate_record(record: Any, where: str = "record", metric: str | None = None) -> dict[str, Any]:
    """`record` if it holds every field and a usable score (`metric`, when known, sets the score's range)."""
    if not isinstance(record, dict):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ResultsFormatError(f"{where}: missing field(s) {missing}; was it written by another tool or version?")
    for key in ("id", "task", "method"):
        if not isinstance(record[key], str):
            raise ResultsFormatError(f"{where}: field {key!r} must be a string, got {record[key]!r}")
    score = record["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ResultsFormatError(
            f"{where}: field 'score' must be a finite number, got {score!r}; delete the line (a rerun redoes it)"
        )
    if metric is not None:
        low, high = SCORE_RANGES.get(metric, METRIC_SCORE_RANGE)
        if not low - SCORE_SLACK <= score <= high + SCORE_SLACK:
            raise ResultsFormatError(
                f"{where}: field 'score' is {score!r}, outside [{low:g}, {high:g}] for metric {metric!r}; delete the "
                "line (a rerun redoes it)"
            )
    return record


def torn_tail(path: str | Path) -> bool:
    """Whether records.jsonl ends in a line without its newline (a run killed while writing it)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def read_records(
    path: str | Path, repair: bool = False, metrics: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """All records of a records.jsonl; a torn last line (a killed run) is dropped, and cut off when `repair`.
    `metrics` (task -> metric name) also checks each score's range."""
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if repair and len(complete) != len(data):
        with open(path, "r+b") as handle:
            handle.truncate(len(complete))
    records = []
    seen: dict[tuple[str, str, str], tuple[int, str]] = {}
    for number, raw in enumerate(complete.split(b"\n")[:-1], start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ResultsFormatError(
                f"{path}:{number} is not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}), so not "
                "a line this harness wrote; delete the line (a rerun redoes its record) or the file"
            ) from None
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ResultsFormatError(
                f"{path}:{number} is not valid JSON ({err.msg}); delete the line or the file"
            ) from err
        validate_record(record, f"{path}:{number}", metrics.get(record.get("task")) if metrics else None)
        key = _record_key(record)
        if key in seen:
            first, first_line = seen[key]
            if line.strip() != first_line:
                raise ResultsFormatError(
                    f"{path}:{number} repeats prompt {key[2]!r} of task {key[0]!r}, method {key[1]!r} from line "
                    f"{first} with a different result (two runs wrote one directory?); delete one of the two lines"
                )
            print(f"note: {path}:{number} repeats line {first} exactly (one record written twice); counted once",
                  file=sys.stderr)  # fmt: skip
            continue
        seen[key] = (number, line.strip())
        records.append(record)
    return records


def record_line(record: Mapping[str, Any]) -> str:
    """A record as its one line of records.jsonl (the bytes every writer uses)."""
    return json.dumps(_clean(dict(record)), ensure_ascii=False, allow_nan=False) + "\n"


def rank_records_file(out: str | Path, rank: int) -> Path:
    """Where rank `rank` of a torchrun evaluation appends its records until the run merges them."""
    return Path(out) / f"records.rank{rank}.jsonl"


def rank_records_files(out: str | Path) -> list[Path]:
    """The per-rank record files in `out` (any world size: a run killed at N ranks resumes at M)."""
    return sorted(Path(out).glob("records.rank*.jsonl"), key=lambda p: int(p.stem.removeprefix("records.rank")))


def merge_rank_records(out: str | Path, order: Callable[[Mapping[str, Any]], Any]) -> int:
    """Append the records of the per-rank files to records.jsonl (atomically), then delete those files.

    records.jsonl keeps its lines as they are; the new records, sorted by
    `order` (the one-process run's order), follow. A record already in the
    file (a merge killed between its write and its deletes) is not added
    twice, so merging again is harmless. Returns the number of records added.
    """
    out = Path(out)
    parts = rank_records_files(out)
    if not parts:
        return 0
    target = out / RECORDS_FILE
    existing = read_records(target)
    present = {_record_key(r) for r in existing}
    added: dict[tuple[str, str, str], dict[str, Any]] = {}
    for part in parts:
        for record in read_records(part):
            key = _record_key(record)
            if key not in present:
                added.setdefault(key, record)
    new = sorted(added.values(), key=order)
    atomic.write_text_atomic(target, "".join(record_line(r) for r in [*existing, *new]), fsync=True)
    for part in parts:
        part.unlink()
    return len(new)


def _record_key(record: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(record["task"]), str(record["method"]), str(record["id"])


class RecordWriter:
    """Appends records to records.jsonl, flushing (and fsyncing) each one as it is produced."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed by close())

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record and force it to disk; a failed write (a full disk) is an OSError naming the file."""
        line = record_line(record)
        with atomic.writing_to(self.path):
            self._handle.write(line)
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        with atomic.writing_to(self.path):
            self._handle.close()


def summarize_group(
    records: Sequence[Mapping[str, Any]],
    baseline: Sequence[Mapping[str, Any]] | None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    n_permutations: int = DEFAULT_PERMUTATIONS,
) -> dict[str, Any]:
    """Metrics of one (task, method): accuracy, curve and shape with CIs, and the comparison with `baseline`.

    Statistics that pool positions (accuracy, ρ, middle, edges, middle − edges, Δ) resample
    questions (`example_id`), since one question at k positions is one independent unit;
    per-position intervals resample that position's rows (one per question). `vs_baseline` pairs
    records by `id` and tests Δ = 0 with a two-sided sign-flip test on per-question mean
    differences; `vs_baseline.middle` does the same on the interior positions only (the middle
    that `middle_minus_edges` compares with the edges). Holm and the verdicts need every method
    of the task: `build_summary` adds them.
    """
    if not records:
        raise ValueError("summarize_group got no records")
    check_bootstrap_args(n_resamples, alpha)
    by_position: dict[int, list[float]] = defaultdict(list)
    for record in records:
        by_position[int(record["gold_position"])].append(float(record["score"]))
    # records built by hand may lack the bookkeeping fields: the grid then ends at the last gold position
    num_positions = max(int(r.get("num_positions", int(r["gold_position"]) + 1)) for r in records)
    curve = accuracy_by_position(records)
    shape = summarize_positions(curve, num_positions)
    table = PositionTable.from_records(records)
    overall, curves = cluster_bootstrap_curves(table, n_resamples, seed)
    position_cis = {p: bootstrap_ci(by_position[p], n_resamples, alpha, seed) for p in sorted(by_position)}
    label = classify_shape({p: (ci.low, ci.high) for p, ci in position_cis.items()})
    worst = None if label == "flat" else min(curve, key=lambda p: (curve[p], p))
    middle, edges = middle_and_edges(curve)
    middle_rows, edges_rows = middle_and_edges_rows(curves)
    result = {
        "n": len(records),
        "n_examples": len(table.clusters),
        "accuracy": float(table.sums.sum() / table.counts.sum()),
        "accuracy_ci": list(percentile_interval(overall, alpha)),
        "num_positions": num_positions,
        "by_position": {
            str(p): {"accuracy": ci.mean, "low": ci.low, "high": ci.high, "n": len(by_position[p])}
            for p, ci in position_cis.items()
        },
        "shape": label,
        "rho": shape["rho"],
        "rho_ci": list(percentile_interval(u_shape_rho_rows(curves, table.positions, num_positions), alpha)),
        "mean_accuracy_over_positions": shape["mean_accuracy"],
        "worst_position": worst,
        "worst_accuracy": shape["worst_accuracy"],
        "middle_minus_edges": shape["middle_minus_edges"],
        "middle_minus_edges_ci": list(percentile_interval(middle_minus_edges_rows(curves), alpha)),
        "middle_accuracy": middle,
        "middle_accuracy_ci": list(percentile_interval(middle_rows, alpha)),
        "edges_accuracy": edges,
        "edges_accuracy_ci": list(percentile_interval(edges_rows, alpha)),
        "truncated": sum(bool(r.get("truncated", False)) for r in records),
        # generated answers that are empty (None: nothing generated, e.g. --score gold_loglik): all of them is
        # a method that answers nothing, whatever its scores say
        "empty_answers": empty_answers(records),
        "vs_baseline": None,
    }
    if len(table.clusters) < 2:  # one question resampled is itself: a zero-width interval would read as exact
        result.update({key: None for key in ONE_QUESTION_NO_INTERVAL}, shape=None)
    if baseline is not None:
        vs = compare_with_baseline(records, baseline, n_resamples, alpha, seed, n_permutations)
        if vs is not None:
            interior = set(table.positions[1:-1])
            in_middle = [r for r in records if int(r["gold_position"]) in interior]
            vs["middle"] = compare_with_baseline(in_middle, baseline, n_resamples, alpha, seed, n_permutations)
        result["vs_baseline"] = vs
    return result


def compare_with_baseline(
    records: Sequence[Mapping[str, Any]],
    baseline: Sequence[Mapping[str, Any]],
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    n_permutations: int = DEFAULT_PERMUTATIONS,
) -> dict[str, Any] | None:
    """Δ = method − baseline over the prompts both scored (paired by `id`), clustered by question.

    `mean_diff` is the mean paired difference over records, `low`/`high` its question-level
    bootstrap interval, `p_value` the two-sided sign-flip test; `identical` says that no paired
    record differs (then p = 1 and the report says so instead of quoting p); `constant_score` is the one
    score every paired record has on both sides, if there is one (equal because nothing could differ), and
    `no_answers` that every answer the method generated for these prompts is empty; with 0/1 scores on both
    sides, `mcnemar` the clustered exact McNemar test (`evaluation.mcnemar`). None without pairs.
    """
    paired = paired_differences(records, baseline)
    if not paired.clusters:
        return None
    reference = {r["id"] for r in baseline}
    answered = [r for r in records if r["id"] in reference and generated(r)]
    empty = empty_answers(answered)
    delta = cluster_bootstrap_ratio(paired.sums, paired.counts, n_resamples, alpha, seed)
    test = sign_flip_test(paired.sums / paired.counts, n_permutations, seed)
    one = len(paired.clusters) < 2  # no interval from one question (ONE_QUESTION_NO_INTERVAL)
    return {
        "mean_diff": delta.mean,
        "low": None if one else delta.low,
        "high": None if one else delta.high,
        "p_value": test.p_value,
        "test": test.description(),
        "identical": paired.identical,
        "constant_score": paired.constant,
        "no_answers": empty is not None and empty == len(answered),
        "n": paired.n_pairs,
        "n_examples": len(paired.clusters),
        **({"mcnemar": mcnemar.to_json()} if (mcnemar := clustered_mcnemar(records, baseline)) else {}),
    }


def build_summary(
    records: Iterable[Mapping[str, Any]],
    model: Mapping[str, Any],
    tasks: Mapping[str, Mapping[str, Any]],
    methods: Sequence[str],
    extra: Mapping[str, Any] | None = None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    n_permutations: int = DEFAULT_PERMUTATIONS,
) -> dict[str, Any]:
    """The summary of a run: metrics for every (task, method) of the grid that has records.

    Each method's p-value against the baseline is also Holm-adjusted over the methods of its
    task (`vs_baseline.p_holm`), since a report reads them as one family of comparisons, and
    turned into a verdict (`vs_baseline.verdict`); the middle-only comparisons form a second
    family (`vs_baseline.middle.p_holm`, `.verdict`).
    """
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[(record["task"], record["method"])].append(record)
    results: dict[str, dict[str, Any]] = {}
    for task in tasks:
        baseline = grouped.get((task, BASELINE)) if BASELINE in methods else None
        results[task] = {}
        for method in methods:
            group = sorted(grouped.get((task, method), []), key=lambda r: r["id"])
            if group:
                ref = baseline if method != BASELINE else None
                results[task][method] = summarize_group(group, ref, n_resamples, alpha, seed, n_permutations)
        add_holm_and_verdicts(results[task], alpha)
    summary = {
        "format_version": FORMAT_VERSION,
        "model": dict(model),
        "methods": list(methods),
        "tasks": {name: dict(spec) for name, spec in tasks.items()},
        "results": results,
        "bootstrap": {
            "n_resamples": n_resamples,
            "alpha": alpha,
            "seed": seed,
            "unit": "example_id",
            "n_permutations": n_permutations,
        },
        **(dict(extra) if extra else {}),
    }
    return _clean(summary)


def add_holm_and_verdicts(by_method: dict[str, dict[str, Any]], alpha: float = 0.05) -> None:
    """Holm-adjust the p-values of a task's comparisons with the baseline, then give each its verdict.

    The overall Δs are one family and the middle-only Δs another: each is adjusted over the methods.
    """
    overall = {m: r["vs_baseline"] for m, r in by_method.items() if r.get("vs_baseline")}
    middle = {m: vs["middle"] for m, vs in overall.items() if vs.get("middle")}
    for family in (overall, middle):
        for method, p in holm_adjust({m: c["p_value"] for m, c in family.items()}).items():
            family[method]["p_holm"] = p
            family[method]["verdict"] = _verdict_of(family[method], alpha)


def comparison_verdict(comparison: Mapping[str, Any] | None, alpha: float = 0.05) -> str | None:
    """The verdict of one `vs_baseline` (or `vs_baseline.middle`) entry: stored, else computed from its numbers.

    Summaries written before verdicts existed have the interval and p-values they need. Without
    `p_holm` (a comparison summarised alone) the raw p is used: Holm over one comparison. None without
    a comparison.
    """
    if not comparison:
        return None
    return comparison.get("verdict") or _verdict_of(comparison, alpha)


def _verdict_of(comparison: Mapping[str, Any], alpha: float) -> str:
    p = comparison.get("p_holm", comparison.get("p_value"))
    return verdict(
        comparison.get("low"),
        comparison.get("high"),
        p,
        bool(comparison.get("identical")),
        alpha,
        constant=comparison.get("constant_score"),  # summaries before it: None, the verdicts they had
        no_answers=bool(comparison.get("no_answers")),
    )


#: `stop_reason` of records that score without generating: gold answers teacher-forced, options ranked.
NOT_GENERATED = ("forced", "loglikelihood")


def empty_answers(records: Sequence[Mapping[str, Any]]) -> int | None:
    """How many of the generated answers of `records` are empty (blank); None when none was generated."""
    answers = [str(r.get("prediction", "")) for r in records if generated(r)]
    return sum(not answer.strip() for answer in answers) if answers else None


def generated(record: Mapping[str, Any]) -> bool:
    """Whether `record`'s prediction is a generated answer: the runner gives every record a `stop_reason`, and
    those of `--score gold_loglik` (an empty prediction) and of log-likelihood tasks (the option chosen) say
    they generated nothing; a record without one (made by hand) is not counted either way."""
    return record.get("stop_reason") not in (None, *NOT_GENERATED)


def validate_summary(summary: Any, where: str = "summary") -> dict[str, Any]:
    """Check the schema of a summary dict; raise `ResultsFormatError` naming the first problem."""
    if not isinstance(summary, dict):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(summary).__name__}")
    version = summary.get("format_version")
    if version is None:
        raise ResultsFormatError(
            f"{where}: no format_version; it was not written by this harness (expected {FORMAT_VERSION})"
        )
    if version == 1:
        raise ResultsFormatError(
            f"{where}: format_version 1 (row-level bootstrap, one-sided p) is outdated; re-summarise it from its "
            "records with `python -m evaluation summarize --out DIR`"
        )
    if version != FORMAT_VERSION:
        raise ResultsFormatError(
            f"{where}: format_version {version!r} is not supported (this version reads {FORMAT_VERSION}); "
            "re-run the evaluation or use the matching version of the project"
        )
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise ResultsFormatError(f"{where}: missing key(s) {missing}")
    for task, by_method in summary["results"].items():
        if task not in summary["tasks"]:
            raise ResultsFormatError(f"{where}: results for task {task!r}, which is not listed under 'tasks'")
        for method, result in by_method.items():
            lacking = [key for key in RESULT_KEYS if key not in result]
            if lacking:
                raise ResultsFormatError(f"{where}: results[{task!r}][{method!r}] is missing key(s) {lacking}")
    return summary


def load_summary(path: str | Path) -> dict[str, Any]:
    """Read and validate a summary.json (a directory means its summary.json)."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no summary at {str(path)!r}; run `python -m evaluation run --out DIR` first")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        reason = err.msg if isinstance(err, json.JSONDecodeError) else err.reason
        raise ResultsFormatError(
            f"{path} is not valid JSON ({reason}): it is truncated or corrupt; rerun the `python -m evaluation run` "
            "command that wrote it (it resumes from records.jsonl and rewrites the summary without generating again)"
        ) from err
    return validate_summary(summary, str(path))


def resummarize(out: str | Path, n_resamples: int | None = None) -> dict[str, Any]:
    """Rebuild `OUT/summary.json` from `OUT/records.jsonl` with this version's statistics.

    The model, tasks, methods, decoding settings and bootstrap settings are taken from the
    existing summary (of any format version), so an old run gets today's statistics without
    generating anything again. Returns the new summary. It holds the directory's run lock (never
    under a run that is writing it), and refuses to replace a summary that has results with one
    that has none (an emptied records file).
    """
    out = Path(out)
    _check_summarizable(out)  # before the lock, which would create the directory
    with locked_directory(out, f"evaluation run directory {out}"):  # never under a run that is writing it
        return _resummarize_locked(out, n_resamples)


#: How a damaged summary.json is made again.
REWRITE_SUMMARY = "rerun the `python -m evaluation run` command that wrote it (it resumes from records.jsonl)"


def _check_summarizable(out: Path) -> None:
    """`out` holds both files `summarize` needs; a missing one is named (which one, and what to do)."""
    missing = [name for name in (SUMMARY_FILE, RECORDS_FILE) if not (out / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{out} has no {' and no '.join(missing)}, so there is nothing to re-summarise; pass --out the directory "
            "of an evaluation run (`python -m evaluation run --out DIR` writes both)"
        )


def _resummarize_locked(out: Path, n_resamples: int | None) -> dict[str, Any]:
    path = out / SUMMARY_FILE
    _check_summarizable(out)
    try:
        old = parse_json_text(path.read_bytes(), str(path), "a summary.json of this harness", REWRITE_SUMMARY)
    except JsonFileError as err:
        raise ResultsFormatError(str(err)) from None
    missing = [key for key in ("model", "methods", "tasks") if not isinstance(old, dict) or key not in old]
    if missing:
        raise ResultsFormatError(f"{path}: missing key(s) {missing}; it was not written by this harness")
    settings = old.get("bootstrap") or {}
    extra = {key: value for key, value in old.items() if key not in SUMMARY_KEYS}
    tasks = old["tasks"] if isinstance(old["tasks"], dict) else {}  # older summaries list the task names only
    metrics = {name: spec["metric"] for name, spec in tasks.items() if isinstance(spec, dict) and "metric" in spec}
    records = [
        r
        for r in read_records(out / RECORDS_FILE, metrics=metrics)
        if r["task"] in old["tasks"] and r["method"] in old["methods"]
    ]
    if torn_tail(out / RECORDS_FILE):
        print(
            f"note: {out / RECORDS_FILE} ends in a torn line (a run killed while writing it): it is not counted, and "
            "rerunning the `python -m evaluation run` command that wrote the directory redoes it",
            file=sys.stderr,
        )
    if not records and any(old.get("results", {}).values()):  # an emptied or replaced records file
        raise ResultsFormatError(
            f"{out / RECORDS_FILE} holds no records of the tasks and methods in {path}, which has results: "
            f"{path} is kept as it is; restore the records file, or rerun the evaluation into another --out"
        )
    summary = build_summary(
        records,
        model=old["model"],
        tasks=old["tasks"],
        methods=old["methods"],
        extra=extra,
        n_resamples=n_resamples or int(settings.get("n_resamples", 1000)),
        alpha=float(settings.get("alpha", 0.05)),
        seed=int(settings.get("seed", 0)),
    )
    write_json_atomic(path, summary)
    return summary
