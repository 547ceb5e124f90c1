"""A killed launcher takes its training workers with it (issue 13: torchrun killed with SIGKILL).

Before, `kill -9 <torchrun>` left both workers training and writing
checkpoints. `repo_common.launcher_watch` makes each launched worker
end with its launcher: prctl(PR_SET_PDEATHSIG, SIGKILL) on Linux, a thread
that watches the parent pid elsewhere. The fast tests load the module alone
(stdlib only) in small processes; the slow one kills a real 2-process
torchrun training.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from repo_common import launcher_watch

WATCH_PY = Path(launcher_watch.__file__)

#: A stand-in launcher: starts one worker that calls watch_launcher() and then sleeps; prints the worker's pid.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], env={**__import__("os").environ})
    print(worker.pid, flush=True)
    worker.wait()
    """
)
WORKER = textwrap.dedent(
    """
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("launcher_watch", sys.argv[1])
    watch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watch)
    if sys.argv[2] == "thread":
        watch.set_parent_death_signal = lambda signum: False  # as on a system without prctl
    print("how", watch.watch_launcher(poll_s=0.1), file=sys.stderr, flush=True)
    time.sleep(60)
    """
)


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pids: list[int], seconds: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if all(_gone(pid) for pid in pids):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(
        f"still running {seconds} s after the launcher was killed: {[p for p in pids if not _gone(p)]}"
    )


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_plain_process_is_not_watched():
    assert launcher_watch.watch_launcher(environ={}) is None
    assert launcher_watch.launched_worker({"TORCHELASTIC_RUN_ID": "x"})
    assert launcher_watch.launched_worker({"LOCAL_RANK": "1"})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl")
@pytest.mark.parametrize("how", ["pdeathsig", "thread"])
def test_a_worker_ends_when_its_launcher_is_killed(tmp_path, how):
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "test", "RANK": "1"}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, WORKER, str(WATCH_PY), how],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr.txt", "w"),  # noqa: SIM115 (closed with the process)
        text=True,
        env=env,
    )
    worker = int(launcher.stdout.readline())
    deadline = time.monotonic() + 20
    while f"how {how}" not in (tmp_path / "stderr.txt").read_text():
        assert time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.05)
    assert not _gone(worker)
    launcher.kill()
    launcher.wait()
    _wait_gone([worker], 5.0)
    if how == "thread":  # the fallback can say why
        assert "the launcher of this worker (rank 1, launcher pid" in (tmp_path / "stderr.txt").read_text()


@pytest.mark.slow  # torchrun: two gloo training processes (~30-60 s on 2 shared cores)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl")
def test_killing_torchrun_stops_both_training_workers(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "repo_train", "fit",
        "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
        "--trainer.max_steps", "100000", "--trainer.default_root_dir", "run", "--trainer.enable_progress_bar", "false",
        "--trainer.logger", "false", "--data.global_batch_size", "4", "--data.micro_batch_size", "2",
        "--data.train", "SyntheticData", "--data.train.seq_len", "16", "--data.train.num_samples", "256",
        "--checkpoint.every_n_train_steps", "5", "--checkpoint.save_last", "false",
    ]  # fmt: skip
    log = open(tmp_path / "log.txt", "w")  # noqa: SIM115
    launcher = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list((tmp_path / "run").rglob("*.ckpt")):  # both workers are training and writing
            assert launcher.poll() is None, (tmp_path / "log.txt").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.5)
        workers = _children(launcher.pid)
        assert len(workers) == 2, workers
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        seconds = _wait_gone(workers, 5.0)
        written = sorted(p.name for p in (tmp_path / "run").rglob("*.ckpt"))
        time.sleep(2.0)
        assert sorted(p.name for p in (tmp_path / "run").rglob("*.ckpt")) == written, "a checkpoint was written after"
        print(f"both workers gone {seconds:.2f} s after the launcher was killed")
    finally:
        try:
            os.killpg(launcher.pid, signal.SIGKILL)  # this test's own session: whatever is left of it
        except ProcessLookupError:
            pass
        log.close()
