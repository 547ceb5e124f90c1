"""Run scripts' step records (`repo_train.scripting.steps`): skip, resume, rerun and run, on real subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from repo_train.scripting.commands import CommandRunner
from repo_train.scripting.steps import Decision, StepLedger, StepRunner, decide, fingerprint

#: A step: append its argv's last word to OUT (a file), so the test sees how often and with what it ran.
WRITER = (
    "import sys, pathlib; p = pathlib.Path(sys.argv[1]); "
    "p.write_text((p.read_text() if p.exists() else '') + sys.argv[-1] + '\\n')"
)
FAIL = "import sys; sys.exit(3)"


def test_decide_covers_every_case():
    done = {"inputs_sha256": "a", "status": "done"}
    assert decide(None, "a", False) == Decision("run", "not run before")
    assert decide(done, "a", True).action == "skip"
    assert decide(done, "a", False) == Decision("rerun", "done earlier, but its outputs are gone")
    assert decide(done, "b", True, ["base"]) == Decision("rerun", "its inputs changed since the last run (base)")
    for status in ("running", "failed", "interrupted"):
        assert decide({"inputs_sha256": "a", "status": status}, "a", False).action == "resume"
    assert decide({"inputs_sha256": "a", "status": "failed"}, "b", True).action == "rerun"


def test_fingerprints_follow_content_not_time(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.bin").write_bytes(b"weights")
    before = fingerprint(tmp_path / "d")
    (tmp_path / "d" / "w.bin").write_bytes(b"weights")  # rewritten, same bytes
    assert fingerprint(tmp_path / "d") == before and fingerprint(tmp_path / "nothing") is None
    (tmp_path / "d" / "w.bin").write_bytes(b"other")
    assert fingerprint(tmp_path / "d") != before


def _steps(tmp_path: Path, dry_run: bool = False) -> StepRunner:
    runner = CommandRunner(tmp_path / "out", cwd=tmp_path, dry_run=dry_run)
    return StepRunner(runner, StepLedger(tmp_path / "out" / "steps.json"), dry_run=dry_run)


def _chain(tmp_path: Path, dry_run: bool = False, resume=None) -> list[str]:
    """Two steps: `first` reads input.txt and writes a.txt; `second` reads a.txt and writes b.txt."""
    steps = _steps(tmp_path, dry_run)
    first = steps.step("first", "first", [sys.executable, "-c", WRITER, str(tmp_path / "a.txt"), "A"],
                       inputs=[tmp_path / "input.txt"], outputs=[tmp_path / "a.txt"], resume=resume)  # fmt: skip
    second = steps.step("second", "second", [sys.executable, "-c", WRITER, str(tmp_path / "b.txt"), "B"],
                        inputs=[tmp_path / "a.txt"], outputs=[tmp_path / "b.txt"], after=["first"])  # fmt: skip
    return [first.action, second.action]


def test_a_rerun_skips_done_steps_and_reruns_downstream_of_a_changed_input(tmp_path, capsys):
    (tmp_path / "input.txt").write_text("v1")
    assert _chain(tmp_path) == ["run", "run"]
    assert _chain(tmp_path) == ["skip", "skip"]
    assert (tmp_path / "a.txt").read_text() == "A\n" and (tmp_path / "b.txt").read_text() == "B\n"
    printed = capsys.readouterr().out
    assert "--- first: skip (done earlier with the same inputs)" in printed
    script = (tmp_path / "out" / "commands.sh").read_text()
    assert "# first (done in an earlier run" in script  # every command stays in commands.sh

    (tmp_path / "input.txt").write_text("v2")  # a changed input: that step and what reads its output rerun
    assert _chain(tmp_path) == ["rerun", "rerun"]
    printed = capsys.readouterr().out
    assert "--- first: rerun (its inputs changed since the last run (" + str(tmp_path / "input.txt") + "))" in printed
    assert "--- second: rerun (its inputs changed since the last run (first ran again))" in printed  # same a.txt
    assert (tmp_path / "a.txt").read_text() == "A\n"  # removed before the fresh run, not appended to
    assert _chain(tmp_path, dry_run=True) == ["skip", "skip"]
    records = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert {r["status"] for r in records.values()} == {"done"} and records["first"]["exit_code"] == 0


def test_a_failed_step_is_recorded_and_resumed_with_its_own_mechanism(tmp_path):
    (tmp_path / "input.txt").write_text("v1")
    steps = _steps(tmp_path)
    with pytest.raises(Exception, match="returned non-zero exit status 3"):
        steps.step("first", "first", [sys.executable, "-c", FAIL], inputs=[tmp_path / "input.txt"])
    record = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]["first"]
    assert record["status"] == "failed" and record["exit_code"] == 3
    with pytest.raises(Exception, match="returned non-zero exit status 3"):  # resumed: its own arguments added
        _steps(tmp_path).step("first", "first", [sys.executable, "-c", FAIL], inputs=[tmp_path / "input.txt"],
                              resume=lambda: ["--continue"])  # fmt: skip
    record = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]["first"]
    assert record["status"] == "failed" and record["argv"][-1] == "--continue"


def test_resume_appends_the_steps_resume_arguments(tmp_path):
    (tmp_path / "input.txt").write_text("v1")
    ledger = StepLedger(tmp_path / "out" / "steps.json")
    steps = StepRunner(CommandRunner(tmp_path / "out", cwd=tmp_path), ledger)
    argv = [sys.executable, "-c", WRITER, str(tmp_path / "a.txt"), "A"]
    _, digest, prints = ledger.plan("first", argv, [tmp_path / "input.txt"], [tmp_path / "a.txt"])
    ledger.update("first", status="running", inputs_sha256=digest, inputs=prints)  # as a kill -9 leaves it
    decision = steps.step("first", "first", argv, inputs=[tmp_path / "input.txt"], outputs=[tmp_path / "a.txt"],
                          resume=lambda: ["resumed"])  # fmt: skip
    assert decision.action == "resume" and (tmp_path / "a.txt").read_text() == "resumed\n"
    ledger.update("first", status="interrupted")
    again = steps.step(
        "first", "first", argv, inputs=[tmp_path / "input.txt"], outputs=[tmp_path / "a.txt"], resume=lambda: None
    )  # fmt: skip  (nothing to continue from: afresh)
    assert again == Decision("rerun", "interrupted earlier with the same inputs, nothing to continue from")
    assert (tmp_path / "a.txt").read_text() == "A\n"


def test_an_unreadable_ledger_is_one_clear_error(tmp_path):
    (tmp_path / "steps.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"is not a readable steps file; delete it to run every step again"):
        StepLedger(tmp_path / "steps.json")
