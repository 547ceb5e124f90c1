"""Atomic output writes: whole files or none, no leftovers, ordinary permissions."""

import json
import math
import os
import socket
import stat
import subprocess
import sys

import pytest

from repo_common.atomic import atomic_directory, atomic_path, save_figure_atomic, write_json_atomic, write_text_atomic


def test_json_round_trip_and_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_json_atomic(tmp_path / "sub" / "out.json", {"a": [1, 2.5], "b": "é"})
    finally:
        os.umask(old)
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [1, 2.5], "b": "é"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # mkstemp alone would leave 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "out.txt", "old\n")
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(path, {"x": math.nan})  # strict JSON: NaN is refused, not written
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_figure_is_saved_whole_and_closed(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure_atomic(fig, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_writers_staging_directories_are_cleaned_by_the_next_write(tmp_path):
    """`kill -9` during an atomic directory write leaves its staging folder (hundreds of MB for a model): the next
    write of the same path removes it, keeps a live writer's, and puts back an earlier output caught between the
    two renames."""
    host, dead = socket.gethostname(), _dead_pid()
    abandoned = tmp_path / f".model.pid{dead}@{host}.abc123.tmp"
    (abandoned / "sub").mkdir(parents=True)
    (abandoned / "sub" / "weights.bin").write_bytes(b"x" * 1000)
    live = tmp_path / f".model.pid{os.getpid()}@{host}.def456.tmp"
    live.mkdir()
    elsewhere = tmp_path / f".model.pid{dead}@another-host.ghi789.tmp"
    elsewhere.mkdir()
    with atomic_directory(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    assert not abandoned.exists() and live.exists() and elsewhere.exists()
    assert (tmp_path / "model" / "config.json").read_text() == "{}"

    earlier = tmp_path / "out"  # killed after the earlier output moved aside, before the new one moved in
    aside = tmp_path / f".out.pid{dead}@{host}.jkl012.old"
    (aside / "out").mkdir(parents=True)
    (aside / "out" / "results.csv").write_text("kept\n")
    with pytest.raises(RuntimeError), atomic_directory(earlier):
        raise RuntimeError("this write fails too")
    assert (earlier / "results.csv").read_text() == "kept\n" and not aside.exists()
