"""Atomic output writes: whole files or none, no leftovers, ordinary permissions."""

import json
import math
import os
import stat

import pytest

from repo_common.atomic import atomic_path, save_figure_atomic, write_json_atomic, write_text_atomic


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
