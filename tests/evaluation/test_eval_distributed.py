"""Evaluation under torchrun: the work split, the merge of per-rank records, and resuming a killed N-rank run.

The fast tests check the pieces in one process (a killed 2-rank run is stood in
for by its per-rank files); the slow ones launch torchrun with 2 gloo workers:
the merged run equals the one-process run byte for byte, and a rank killed
with SIGKILL mid-run loses nothing once the command is rerun (with 1 process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluation.results import RECORDS_FILE, SUMMARY_FILE, merge_rank_records, rank_records_file, read_records
from evaluation.runner import RunConfig, run
from repo_common.distributed import balanced_shares

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the split


def test_shares_cover_every_unit_once_and_balance_the_cost():
    costs = [50, 10, 10, 40, 30, 30, 20, 5, 5, 1]
    for world in (1, 2, 3, 4, 16):
        shares = balanced_shares(costs, world)
        assert len(shares) == world
        assert sorted(i for share in shares for i in share) == list(range(len(costs)))
        assert all(share == sorted(share) for share in shares)  # each rank walks its units in their own order
        loads = [sum(costs[i] for i in share) for share in shares]
        best_possible = max(max(costs), sum(costs) / world)
        assert max(loads) <= 4 / 3 * best_possible + 1e-9  # the longest-first bound
    assert balanced_shares(costs, 2) == [[0, 1, 2, 5, 9], [3, 4, 6, 7, 8]]  # loads 101 and 100 (sum 201)
    assert balanced_shares([], 3) == [[], [], []]


def test_shares_are_a_function_of_the_costs_alone():
    costs = [7, 7, 7, 3, 3]
    assert balanced_shares(costs, 2) == balanced_shares(list(costs), 2) == [[0, 2], [1, 3, 4]]
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        balanced_shares(costs, 0)


# ---------------------------------------------------------------- the merge


def _record(task: str, method: str, row_id: str, score: float = 1.0) -> dict:
    return {
        "id": row_id, "example_id": row_id.split("@")[0], "task": task, "method": method, "gold_position": 0,
        "num_positions": 3, "prediction": "x", "answers": ["x"], "score": score, "prompt_tokens": 5,
        "truncated": False, "stop_reason": "eos",
    }  # fmt: skip


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_merge_appends_rank_records_in_the_given_order_once_and_deletes_the_rank_files(tmp_path):
    first = [_record("kv", "baseline", "a@0")]
    _write(tmp_path / RECORDS_FILE, first)
    _write(rank_records_file(tmp_path, 0), [_record("kv", "baseline", "c@0"), _record("kv", "baseline", "a@0")])
    _write(rank_records_file(tmp_path, 3), [_record("kv", "baseline", "b@0")])
    order = {"a@0": 0, "b@0": 1, "c@0": 2}
    assert merge_rank_records(tmp_path, lambda r: order[r["id"]]) == 2
    assert [r["id"] for r in read_records(tmp_path / RECORDS_FILE)] == ["a@0", "b@0", "c@0"]
    assert not list(tmp_path.glob("records.rank*"))
    before = (tmp_path / RECORDS_FILE).read_bytes()
    assert merge_rank_records(tmp_path, lambda r: 0) == 0  # nothing left to merge
    _write(rank_records_file(tmp_path, 1), [_record("kv", "baseline", "b@0")])  # a merge killed before its deletes
    assert merge_rank_records(tmp_path, lambda r: 0) == 0
    assert (tmp_path / RECORDS_FILE).read_bytes() == before


# ---------------------------------------------------------------- resuming a killed 2-rank run in one process


def _config(out: Path) -> RunConfig:
    tasks = {"kv": dict(num_keys=3, num_examples=4, gold_positions="all")}
    return RunConfig(
        out=str(out), tasks=tasks, methods=["baseline", "pi:scale=2"], max_new_tokens=4, batch_size=2,
        bootstrap_resamples=200,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("one-process")
    run(_config(out), progress=False)
    return out


def test_a_killed_two_rank_run_resumes_in_one_process_to_the_same_results(tmp_path, reference):
    records = (reference / RECORDS_FILE).read_text().splitlines(keepends=True)
    assert len(records) == 2 * 4 * 3
    out = tmp_path / "killed"
    out.mkdir()
    (out / "run.json").write_text((reference / "run.json").read_text())
    # what two ranks had appended when they were killed: rank 0 a few records and a torn line, rank 1 others
    rank0 = records[0:5] + [records[5][: len(records[5]) // 2]]
    rank1 = records[12:19]
    rank_records_file(out, 0).write_text("".join(rank0))
    rank_records_file(out, 1).write_text("".join(rank1))
    summary = run(_config(out), progress=False)
    assert not list(out.glob("records.rank*"))
    assert sorted((out / RECORDS_FILE).read_text().splitlines()) == sorted(line.rstrip("\n") for line in records)
    assert (out / SUMMARY_FILE).read_bytes() == (reference / SUMMARY_FILE).read_bytes()
    assert summary == json.loads((reference / SUMMARY_FILE).read_text())


# ---------------------------------------------------------------- torchrun, 2 gloo workers

TASK_ARGS = ["--tasks", "kv", "--task_param", "kv:num_keys=3", "--task_param", "kv:num_examples=6",
             "--task_param", "kv:gold_positions=all", "--methods", "baseline", "--methods", "pi:scale=2",
             "--max_new_tokens", "4", "--batch_size", "2"]  # fmt: skip


def _evaluate(out: Path, processes: int, **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command = [*(launcher if processes > 1 else [sys.executable]), "-m", "evaluation", "run", "--out", str(out)]
    return subprocess.Popen([*command, *TASK_ARGS, "--no_progress"], cwd=REPO, env=env, text=True, **popen)


def _finish(process: subprocess.Popen, timeout: float = 300) -> None:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, (err or "")[-3000:]


@pytest.fixture(scope="module")
def cli_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli-one-process") / "run"
    _finish(_evaluate(out, 1, stderr=subprocess.PIPE))
    return out


@pytest.mark.slow
def test_two_gloo_ranks_write_the_one_process_run(tmp_path, cli_reference):
    out = tmp_path / "run"
    _finish(_evaluate(out, 2, stderr=subprocess.PIPE))
    assert not list(out.glob("records.rank*"))
    for name in (RECORDS_FILE, SUMMARY_FILE, "run.json"):
        assert (out / name).read_bytes() == (cli_reference / name).read_bytes(), name
    plots = sorted(p.name for p in cli_reference.glob("*.png"))
    assert plots and sorted(p.name for p in out.glob("*.png")) == plots


def _worker_pids(launcher: int) -> dict[int, int]:
    """rank -> pid of the torchrun workers under `launcher` (read from /proc)."""
    workers = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        rank = next((item[5:] for item in environ if item.startswith(b"RANK=")), None)
        if parent == launcher and rank is not None:
            workers[int(rank)] = int(entry.name)
    return workers


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
def test_a_rank_killed_mid_run_loses_nothing_when_the_command_is_rerun(tmp_path, cli_reference):
    out = tmp_path / "run"
    launcher = _evaluate(out, 2, stderr=subprocess.DEVNULL)
    part = rank_records_file(out, 1)
    deadline = time.monotonic() + 240
    while not (part.is_file() and part.read_text().count("\n") >= 3):
        assert launcher.poll() is None and time.monotonic() < deadline, "rank 1 wrote no records in time"
        time.sleep(0.05)
    os.kill(_worker_pids(launcher.pid)[1], signal.SIGKILL)
    assert launcher.wait(timeout=120) != 0  # torchrun stops the other rank and fails
    assert list(out.glob("records.rank*"))  # what the ranks wrote is still there
    _finish(_evaluate(out, 1, stderr=subprocess.PIPE))  # rerun, with another number of processes
    assert not list(out.glob("records.rank*"))
    expected = sorted((cli_reference / RECORDS_FILE).read_text().splitlines())
    assert sorted((out / RECORDS_FILE).read_text().splitlines()) == expected  # nothing lost, nothing twice
    assert (out / SUMMARY_FILE).read_bytes() == (cli_reference / SUMMARY_FILE).read_bytes()
