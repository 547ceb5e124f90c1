"""Run scripts' step records (`workflows.steps`): skip, resume, rerun and run, on real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from interrupt import sigint_as_in_a_terminal

from workflows.commands import CommandRunner
from workflows.steps import Decision, StepLedger, StepRunner, decide, fingerprint, gpu_slots

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


#: A step that needs its partner running at the same time: it writes its own flag file, then waits (at most
#: argv[4] seconds) for the partner's; it also records the environment it was given. Run one after the other,
#: the first times out (exit 4): finishing both proves that they ran together.
PARTNER = (
    "import os, sys, time, json, pathlib; own, other, out = map(pathlib.Path, sys.argv[1:4]); own.touch(); "
    "deadline = time.time() + float(sys.argv[4])\n"
    "while not other.exists():\n"
    "    if time.time() > deadline: sys.exit(4)\n"
    "    time.sleep(0.05)\n"
    "keys = ('CUDA_VISIBLE_DEVICES', 'NPROC_PER_NODE', 'MASTER_PORT'); "
    "out.write_text(json.dumps({k: os.environ.get(k) for k in keys}))"
)


def _partners(tmp_path: Path, patience: float = 60.0) -> list[dict]:
    def spec(name: str, other: str) -> dict:
        files = [str(tmp_path / f"{name}.flag"), str(tmp_path / f"{other}.flag"), str(tmp_path / f"{name}.json")]
        argv = [sys.executable, "-c", PARTNER, *files, str(patience)]
        return dict(key=f"eval-{name}", title=f"evaluate {name}", argv=argv,
                    outputs=[tmp_path / f"{name}.json"])  # fmt: skip

    return [spec("a", "b"), spec("b", "a")]


def test_steps_together_share_the_node_on_disjoint_gpus(tmp_path, capsys):
    steps = _steps(tmp_path)
    steps.together(_partners(tmp_path), gpu_slots(8, 2), logs=tmp_path / "out" / "logs")
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in "ab"}
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in seen.values()) == ["0,1,2,3", "4,5,6,7"]
    assert {e["NPROC_PER_NODE"] for e in seen.values()} == {"4"}
    assert len({e["MASTER_PORT"] for e in seen.values()}) == 2
    ledger = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert {ledger[k]["status"] for k in ("eval-a", "eval-b")} == {"done"}
    assert (tmp_path / "out" / "logs" / "eval-a.log").is_file()
    script = (tmp_path / "out" / "commands.sh").read_text()
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in script and "CUDA_VISIBLE_DEVICES=4,5,6,7" in script
    # a rerun skips both (the ledger written from two threads holds both records)
    capsys.readouterr()
    _steps(tmp_path).together(_partners(tmp_path), gpu_slots(8, 2), logs=tmp_path / "out" / "logs")
    assert capsys.readouterr().out.count(": skip (done earlier") == 2


def test_one_slot_runs_them_in_turn_and_a_failure_lets_the_other_finish(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):  # in turn, the first waits for a partner that never runs
        _steps(tmp_path / "turn").together(_partners(tmp_path / "turn", 1.0), gpu_slots(8, 1), logs=tmp_path / "l")
    steps = _steps(tmp_path)
    good = dict(key="good", title="good", argv=[sys.executable, "-c", WRITER, str(tmp_path / "g.txt"), "G"],
                outputs=[tmp_path / "g.txt"])  # fmt: skip
    bad = dict(key="bad", title="bad", argv=[sys.executable, "-c", FAIL], outputs=[tmp_path / "never"])
    with pytest.raises(subprocess.CalledProcessError):
        steps.together([bad, good], gpu_slots(2, 2), logs=tmp_path / "logs")
    ledger = json.loads((tmp_path / "out" / "steps.json").read_text())["steps"]
    assert ledger["good"]["status"] == "done" and ledger["bad"]["status"] == "failed"
    assert (tmp_path / "g.txt").read_text() == "G\n"


def test_gpu_slots_split_the_node_and_refuse_an_uneven_split():
    assert [s["CUDA_VISIBLE_DEVICES"] for s in gpu_slots(4, 2, visible="3,5,6,7")] == ["3,5", "6,7"]
    assert gpu_slots(8, 1)[0] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NPROC_PER_NODE": "8",
                                  "MASTER_PORT": "29500"}  # fmt: skip
    with pytest.raises(ValueError, match="cannot be split into 3 equal slices"):
        gpu_slots(8, 3)
    with pytest.raises(ValueError, match="fewer than gpus"):
        gpu_slots(4, 2, visible="0,1")


#: A script running two long steps together; each step writes its pid, then sleeps.
TOGETHER_SCRIPT = """
import sys
from pathlib import Path
from workflows.commands import CommandRunner
from workflows.steps import StepLedger, StepRunner, gpu_slots
out = Path(sys.argv[1])
sleeper = "import os, sys, time, pathlib; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(120)"
steps = StepRunner(CommandRunner(out, cwd=out), StepLedger(out / "steps.json"))
specs = [dict(key=k, title=k, argv=[sys.executable, "-c", sleeper, str(out / (k + ".pid"))]) for k in ("a", "b")]
try:
    steps.together(specs, gpu_slots(2, 2), logs=out / "logs")
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow  # a Python process importing the project, plus two steps
def test_ctrl_c_stops_every_step_that_runs_together(tmp_path):
    import os
    import signal
    import time

    script = subprocess.Popen(
        [sys.executable, "-c", TOGETHER_SCRIPT, str(tmp_path)],
        cwd=Path(__file__).parents[1],
        preexec_fn=sigint_as_in_a_terminal,  # noqa: PLW1509 (one signal call)
    )
    pids = [tmp_path / "a.pid", tmp_path / "b.pid"]
    deadline = time.monotonic() + 120
    while not all(p.is_file() and p.read_text() for p in pids):
        assert time.monotonic() < deadline and script.poll() is None, "the steps did not start"
        time.sleep(0.1)
    script.send_signal(signal.SIGINT)  # to the script only, as `kill -INT` would: it must stop its steps itself
    assert script.wait(timeout=60) == 130
    for pid in (int(p.read_text()) for p in pids):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
