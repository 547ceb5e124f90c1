"""One writer per output: the run lock (`repo_common.run_lock`) itself.

A second writer is refused while the first holds the lock, a dead process's
lock is taken over with a warning, another host's lock is left alone, and of
simultaneous starters exactly one wins.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from bad_input_helpers import (
    RUN_LOCK_PY,
    context_in,
    foreign_lock,
)

from repo_common.run_lock import LOCK_FILE, RunLockedError, run_lock

STARTER = textwrap.dedent(
    """
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
    run_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_lock)
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # all start at once
    try:
        with run_lock.run_lock(sys.argv[2]):
            print("won", flush=True)
            time.sleep(1.0)
    except run_lock.RunLockedError as err:
        print("refused", flush=True)
    """
)


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
    with context_in(tmp_path) as ctx:
        lock = ctx.tmp / "out" / LOCK_FILE
        holder = ctx.hold(lock)
        owner = json.loads(lock.read_text())
        assert owner["pid"] == holder.pid and owner["host"] == socket.gethostname()
        with pytest.raises(RunLockedError) as info, run_lock(lock, "OUT"):
            pass
        message = str(info.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message and str(lock) in message
        assert "\n" not in message
        ctx.release_all()
        assert not lock.exists()  # released on exit
        with run_lock(lock):
            assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / LOCK_FILE
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "crashed run"}))
    with run_lock(lock):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"taking over the stale lock {lock} of pid {dead.pid}" in err
    assert not lock.exists()


def test_a_lock_from_another_host_is_refused_not_taken_over(tmp_path):
    lock = tmp_path / LOCK_FILE
    foreign_lock(lock)
    with (
        pytest.raises(RunLockedError, match="pid 4242 on host elsewhere.example .* delete the lock file"),
        run_lock(lock),
    ):
        pass
    assert json.loads(lock.read_text())["host"] == "elsewhere.example"  # left alone


def test_the_lock_is_released_on_an_exception(tmp_path):
    lock = tmp_path / "d" / LOCK_FILE
    with pytest.raises(KeyError), run_lock(lock):
        raise KeyError("boom")
    assert not lock.exists()
    with run_lock(lock):  # free again
        pass


def test_of_simultaneous_starters_exactly_one_wins(tmp_path):
    lock = tmp_path / "out" / LOCK_FILE
    start = time.time() + 0.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(RUN_LOCK_PY), str(lock), str(start)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outcomes = sorted(proc.communicate(timeout=30)[0].strip() for proc in procs)
    assert outcomes == ["refused", "refused", "refused", "won"]
    assert not lock.exists()
