"""`python -m evaluation lm-eval report`: lm-eval's per-sample output of the Lost-in-the-Middle tasks
(`python -m evaluation lm-eval tasks`, run with `--log_samples`) as this project's run directory.

Each `--runs METHOD=PATH` is one lm-eval output folder (searched for its `samples_<task>_*.jsonl` files), read as
the method METHOD; the run named `baseline` is the reference. Every sample carries the row the task was written
from (its `doc`: id, question, gold position), so the records are those `python -m evaluation run` writes, and
the summary, the question-clustered CIs, the paired sign-flip tests with Holm, McNemar and the verdicts come from
the same code (`evaluation.results.build_summary`), then the plots and report.md (`evaluation.report`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from evaluation.lm_eval_tasks import SCORES
from evaluation.report import render_report
from evaluation.results import (
    BASELINE,
    RECORDS_FILE,
    SUMMARY_FILE,
    build_summary,
    record_line,
    validate_record,
    write_json_atomic,
)
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config
from repo_common.output_guard import check_output_directory


@dataclass
class LmEvalReport:
    """The lm-eval runs to read, and where the project's summary and report go."""

    out: str
    """run directory to write (records.jsonl, summary.json, plots, report.md)"""
    runs: list[str] = field(default_factory=list)
    """METHOD=PATH, repeatable: an lm-eval --output_path folder (with --log_samples) read as method METHOD; one
    METHOD must be 'baseline', the reference of the paired tests"""
    bootstrap_resamples: int = 1000
    """bootstrap resamples of every interval"""

    def __post_init__(self) -> None:
        """Each run parsed into (method, folder), the folders present, one baseline."""
        self.run_list: list[tuple[str, Path]] = []
        for item in self.runs:
            method, sep, path = item.rpartition("=")  # a method spec holds "=" too (pi:scale=2=DIR)
            if not sep or not method or not path:
                raise ValueError(f"--runs {item!r}: give METHOD=PATH (e.g. baseline=results/hf)")
            if not Path(path).is_dir():
                raise ValueError(f"--runs {item!r}: no folder {path}; pass lm-eval's --output_path of that run")
            self.run_list.append((method, Path(path)))
        methods = [method for method, _ in self.run_list]
        if not methods or len(set(methods)) != len(methods):
            raise ValueError("--runs: give each method once (METHOD=PATH, repeatable), one of them named baseline")
        if self.bootstrap_resamples < 100:
            raise ValueError(f"--bootstrap_resamples {self.bootstrap_resamples}: use at least 100")


def add_arguments(parser: ConfigParser) -> None:
    parser.description = __doc__.split("\n\n")[0]
    add_dataclass_options(parser, LmEvalReport)
    parser.repeatable = ("runs",)


def sample_files(folder: Path) -> list[Path]:
    """lm-eval's per-sample files under `folder` (any depth; the newest file of each task when it ran twice)."""
    newest: dict[str, Path] = {}
    for path in sorted(folder.rglob("samples_*.jsonl")):
        task = path.name[len("samples_") :].rsplit("_", 1)[0]
        newest[task] = path  # lm-eval's timestamps sort in time order
    return list(newest.values())


def records_of(method: str, folder: Path) -> list[dict[str, Any]]:
    """The project's records of one lm-eval run: one per sample of a Lost-in-the-Middle task."""
    records = []
    for path in sample_files(folder):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            sample = json.loads(line)
            doc = sample.get("doc") or {}
            family = doc.get("family")
            if family not in SCORES:
                break  # a task that `lm-eval tasks` did not write
            metric = SCORES[family][0]
            prediction = sample["filtered_resps"][0]
            record = {
                "id": doc["id"],
                "example_id": doc["example_id"],
                "task": family,
                "method": method,
                "gold_position": doc["gold_position"],
                "num_positions": doc["num_positions"],
                "prediction": prediction if isinstance(prediction, str) else str(prediction),
                "answers": doc["answers"],
                "score": sample[metric],
                "prompt_tokens": None,
                "truncated": False,
            }
            records.append(validate_record(record, f"{path}, line {number}", metric))
    if not records:
        raise FileNotFoundError(
            f"{folder} holds no samples of the Lost-in-the-Middle tasks: run lm-eval with --log_samples and "
            "--output_path there on a group that `python -m evaluation lm-eval tasks` wrote"
        )
    return records


def run_model(folder: Path) -> str:
    """The model a run evaluated, as its lm-eval results file names it (`config.model_args`)."""
    for path in sorted(folder.rglob("results_*.json"), reverse=True):
        config = json.loads(path.read_text(encoding="utf-8")).get("config", {})
        return f"{config.get('model')} {config.get('model_args')}"
    return str(folder)


def run(parsed: Namespace, _parser: ConfigParser) -> int:
    options = dataclass_config(parsed, LmEvalReport)
    out = check_output_directory(options.out, SUMMARY_FILE, "an evaluation run directory")
    records = [record for method, folder in options.run_list for record in records_of(method, folder)]
    methods = [method for method, _ in options.run_list]
    methods = [BASELINE, *(m for m in methods if m != BASELINE)] if BASELINE in methods else methods
    tasks: dict[str, dict[str, Any]] = defaultdict(dict)
    for record in records:
        tasks[record["task"]] = {"metric": SCORES[record["task"]][0], "params": {"source": "lm-eval samples"}}
    out.mkdir(parents=True, exist_ok=True)
    (out / RECORDS_FILE).write_text("".join(record_line(r) for r in records), encoding="utf-8")
    model = {
        "name": run_model(options.run_list[0][1]),
        "class": "lm-eval per-sample output",
        "config_sha256": "not recorded",
        "runs": {method: str(folder) for method, folder in options.run_list},
    }
    summary = build_summary(records, model, dict(tasks), methods, n_resamples=options.bootstrap_resamples)
    write_json_atomic(out / SUMMARY_FILE, summary)
    for path in render_report(out):
        print(path)
    return 0
