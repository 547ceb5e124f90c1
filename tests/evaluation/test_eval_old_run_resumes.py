"""A run directory written before the typed config (methods passed on as spec strings) resumes unchanged.

The fixture (tests/fixtures/eval_run_before_typed_config, README there) holds every record of its grid, so a
rerun must generate nothing: the record keys (task names, method stack labels) and the pins of run.json that
the typed `RunConfig` derives from its objects must equal the ones the string path wrote, byte for byte.
A run.json that pinned only the task parameters a Python caller gave is completed, not refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evaluation.cli import main

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eval_run_before_typed_config"
STORED = ("records.jsonl", "run.json")
SHORT_FORMS = [
    *("--tasks", "kv", "--num_keys", "3", "--num_examples", "2", "--gold_positions", "all"),
    *("--max_new_tokens", "3", "--batch_size", "4", "--no_report", "--no_progress"),
    *("--methods", "baseline", "--methods", "pi:scale=2", "--methods", "pi:scale=3"),
    *("--methods", "caliope:calibrator=hourglass+pi:scale=2"),
]


@pytest.mark.parametrize(
    "how",
    ["its config.yaml", "the short forms", "a Python caller's run.json"],
    ids=["config-yaml", "short-forms", "given-params-only"],
)
def test_an_old_run_directory_resumes_without_new_records(tmp_path, capsys, how):
    out = tmp_path / "run"
    shutil.copytree(FIXTURE, out, ignore=shutil.ignore_patterns("README.md"))
    if how == "a Python caller's run.json":  # RunConfig(tasks={"kv": {...}}) pinned the parameters it was given
        manifest = json.loads((out / "run.json").read_text())
        manifest["tasks"]["kv"]["params"] = {"num_keys": 3, "num_examples": 2, "gold_positions": "all"}
        (out / "run.json").write_text(json.dumps(manifest))
    argv = ["--config", str(out / "config.yaml")] if how == "its config.yaml" else SHORT_FORMS
    assert main(["run", *argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "caliope:calibrator=hourglass,delta_min=5,delta_max=1000,boundaries=spans+pi:scale=2 n=6" in printed
    for name in STORED:
        assert (out / name).read_bytes() == (FIXTURE / name).read_bytes(), name
    # The summary is rebuilt with this version's statistics: the same numbers, plus what was added since (the
    # McNemar test, the empty-answer counts and the degenerate-comparison fields), and the verdicts of today's
    # rule: the tiny random model scores 0 everywhere, which the fixture called "identical"
    rebuilt = json.loads((out / "summary.json").read_text())
    verdicts = {m: r["vs_baseline"]["verdict"] for m, r in rebuilt["results"]["kv"].items() if r["vs_baseline"]}
    assert set(verdicts.values()) == {"uninformative (every score 0)"} and len(verdicts) == 3
    assert _without_added(rebuilt) == _without_added(json.loads((FIXTURE / "summary.json").read_text()))


#: Summary keys added after the fixture was written, or whose rule changed since (the verdict).
ADDED = {"mcnemar", "empty_answers", "constant_score", "no_answers", "verdict"}


def _without_added(value):
    if isinstance(value, dict):
        return {k: _without_added(v) for k, v in value.items() if k not in ADDED}
    return [_without_added(v) for v in value] if isinstance(value, list) else value
