"""What an evaluation run writes, and the checks that read it back.

`OUT/records.jsonl`: one JSON object per (task, method, example row), appended
and flushed as produced, so a killed run loses at most the line being written
(`read_records` drops such a torn last line). `OUT/summary.json`: metrics per
(task, method), written atomically (temporary file + `os.replace`), versioned by
`format_version`; `load_summary` refuses a file of another version or with
missing keys, naming what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.position_metrics import accuracy_by_position, bootstrap_ci, paired_bootstrap, summarize_positions
from repo_train import atomic

FORMAT_VERSION = 1
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
    "accuracy",
    "accuracy_ci",
    "num_positions",
    "by_position",
    "rho",
    "worst_position",
    "worst_accuracy",
    "middle_minus_edges",
    "truncated",
    "vs_baseline",
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
    """Write JSON to `path` through a temporary file in the same directory and `os.replace`."""
    atomic.write_json_atomic(path, _clean(data), indent=2, fsync=True)


def validate_record(record: Any, where: str = "record") -> dict[str, Any]:
    if not isinstance(record, dict):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ResultsFormatError(f"{where}: missing field(s) {missing}; was it written by another tool or version?")
    return record


def read_records(path: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """All records of a records.jsonl; a torn last line (a killed run) is dropped, and cut off when `repair`."""
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if repair and len(complete) != len(data):
        with open(path, "r+b") as handle:
            handle.truncate(len(complete))
    records = []
    for number, line in enumerate(complete.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ResultsFormatError(
                f"{path}:{number} is not valid JSON ({err.msg}); delete the line or the file"
            ) from err
        records.append(validate_record(record, f"{path}:{number}"))
    return records


class RecordWriter:
    """Appends records to records.jsonl, flushing (and fsyncing) each one as it is produced."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed by close())

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(json.dumps(_clean(dict(record)), ensure_ascii=False, allow_nan=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def summarize_group(
    records: Sequence[Mapping[str, Any]],
    baseline: Sequence[Mapping[str, Any]] | None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, Any]:
    """Metrics of one (task, method): accuracy with CI, per-position accuracy with CI, curve shape, vs baseline."""
    if not records:
        raise ValueError("summarize_group got no records")
    scores = [float(r["score"]) for r in records]
    by_position: dict[int, list[float]] = defaultdict(list)
    for record in records:
        by_position[int(record["gold_position"])].append(float(record["score"]))
    num_positions = max(int(r["num_positions"]) for r in records)
    curve = accuracy_by_position(records)
    shape = summarize_positions(curve, num_positions)
    worst = min(curve, key=lambda p: (curve[p], p))
    ci = bootstrap_ci(scores, n_resamples, alpha, seed)
    result = {
        "n": len(records),
        "accuracy": ci.mean,
        "accuracy_ci": [ci.low, ci.high],
        "num_positions": num_positions,
        "by_position": {},
        "rho": shape["rho"],
        "mean_accuracy_over_positions": shape["mean_accuracy"],
        "worst_position": worst,
        "worst_accuracy": shape["worst_accuracy"],
        "middle_minus_edges": shape["middle_minus_edges"],
        "truncated": sum(bool(r["truncated"]) for r in records),
        "vs_baseline": None,
    }
    for position in sorted(by_position):
        pos_ci = bootstrap_ci(by_position[position], n_resamples, alpha, seed)
        result["by_position"][str(position)] = {
            "accuracy": pos_ci.mean,
            "low": pos_ci.low,
            "high": pos_ci.high,
            "n": len(by_position[position]),
        }
    if baseline is not None:
        reference = {r["id"]: float(r["score"]) for r in baseline}
        ids = sorted(r["id"] for r in records if r["id"] in reference)
        mine = {r["id"]: float(r["score"]) for r in records}
        if ids:
            paired = paired_bootstrap([mine[i] for i in ids], [reference[i] for i in ids], n_resamples, alpha, seed)
            result["vs_baseline"] = {**paired._asdict(), "n": len(ids)}
    return result


def build_summary(
    records: Iterable[Mapping[str, Any]],
    model: Mapping[str, Any],
    tasks: Mapping[str, Mapping[str, Any]],
    methods: Sequence[str],
    extra: Mapping[str, Any] | None = None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, Any]:
    """The summary of a run: metrics for every (task, method) of the grid that has records."""
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
                results[task][method] = summarize_group(group, ref, n_resamples, alpha, seed)
    summary = {
        "format_version": FORMAT_VERSION,
        "model": dict(model),
        "methods": list(methods),
        "tasks": {name: dict(spec) for name, spec in tasks.items()},
        "results": results,
        "bootstrap": {"n_resamples": n_resamples, "alpha": alpha, "seed": seed},
        **(dict(extra) if extra else {}),
    }
    return _clean(summary)


def validate_summary(summary: Any, where: str = "summary") -> dict[str, Any]:
    """Check the schema of a summary dict; raise `ResultsFormatError` naming the first problem."""
    if not isinstance(summary, dict):
        raise ResultsFormatError(f"{where}: expected a JSON object, got {type(summary).__name__}")
    version = summary.get("format_version")
    if version is None:
        raise ResultsFormatError(f"{where}: no format_version; it was not written by this harness (expected 1)")
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
    except json.JSONDecodeError as err:
        raise ResultsFormatError(f"{path} is not valid JSON ({err.msg})") from err
    return validate_summary(summary, str(path))
