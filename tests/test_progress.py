"""repo_common.progress: plain lines in a log (format, rate, ETA), a tqdm bar only on a terminal."""

import io

import pytest

from repo_common.progress import Progress, format_duration, progress_line, resolve_mode, track


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def lines_of(stream):
    return stream.getvalue().splitlines()


def test_durations_read_as_seconds_minutes_hours():
    assert [format_duration(s) for s in (0, 4.4, 59.6, 62, 190, 3600, 3 * 3600 + 7 * 60 + 59)] == [
        "0s", "4s", "1m00s", "1m02s", "3m10s", "1h00m", "3h07m",
    ]  # fmt: skip


def test_line_format_with_total_fields_and_without_total():
    line = progress_line("kv / baseline", 12, 40, 62.0, 144.7, {"loss": 4.36812, "tokens/s": 10640.4, "lr": 0.0029417})
    assert line == "kv / baseline: 12/40 (30%)  elapsed 1m02s  eta 2m25s  loss 4.368  tokens/s 10640  lr 0.002942"
    assert progress_line("candidates", 3, None, 5.0, None, {}) == "candidates: 3  elapsed 5s"


def test_a_line_needs_both_every_items_and_seconds_and_the_eta_follows_the_rate():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress(100, "eval", mode="lines", every=5, seconds=10.0, stream=out, clock=clock)
    for _ in range(4):  # 4 items in 40 s: time is due, items are not
        clock.now += 10
        progress.update()
    assert lines_of(out) == []
    clock.now += 10
    progress.update()  # 5 items, 50 s: due
    assert lines_of(out) == ["eval: 5/100 (5%)  elapsed 50s  eta 15m50s"]  # 95 items at 10 s each
    for _ in range(9):  # 9 more items in 4.5 s: items are due, time is not
        clock.now += 0.5
        progress.update(loss=2.5)
    assert len(lines_of(out)) == 1
    clock.now += 5.5
    progress.update(loss=2.0)
    assert lines_of(out)[-1] == "eval: 15/100 (15%)  elapsed 1m00s  eta 5m40s  loss 2"


def test_the_last_item_closes_with_a_line_only_once_lines_were_written():
    clock, out = FakeClock(), io.StringIO()
    quick = Progress(3, "quick", mode="lines", seconds=10.0, stream=out, clock=clock)
    for _ in range(3):
        clock.now += 1
        quick.update()
    assert lines_of(out) == []  # ended before a line was due: a short run stays silent
    slow = Progress(3, "slow", mode="lines", seconds=10.0, stream=out, clock=clock)
    for _ in range(3):
        clock.now += 6
        slow.update()
    assert lines_of(out) == ["slow: 2/3 (67%)  elapsed 12s  eta 6s", "slow: 3/3 (100%)  elapsed 18s"]


def test_a_resumed_count_takes_the_eta_from_this_runs_rate():
    clock, out = FakeClock(), io.StringIO()
    progress = Progress(300, "train step", initial=200, mode="lines", every=10, seconds=0, stream=out, clock=clock)
    clock.now += 20
    progress.set(210, loss=3.0)  # 10 steps in 20 s -> 90 steps left: 3 min
    assert lines_of(out) == ["train step: 210/300 (70%)  elapsed 20s  eta 3m00s  loss 3"]


def test_bar_on_a_terminal_lines_elsewhere_nothing_when_off():
    terminal = Terminal()
    bar = Progress(4, "cands", unit="cand", mode=True, seconds=0, stream=terminal)
    assert bar.mode == "bar"
    bar.update(4)
    bar.close()
    assert "cands: 100%" in terminal.getvalue() and "4/4" in terminal.getvalue()  # tqdm's own drawing
    log = io.StringIO()
    plain = Progress(4, "cands", mode=True, seconds=0, stream=log)
    assert plain.mode == "lines"  # asked for a bar, but the stream is a file
    plain.update(4)
    assert lines_of(log) == ["cands: 4/4 (100%)  elapsed 0s"]
    off = io.StringIO()
    silent = Progress(4, "cands", mode="off", seconds=0, stream=off)
    silent.update(4)
    silent.write("a message")
    assert off.getvalue() == ""


def test_track_counts_an_item_once_the_loop_asks_for_the_next():
    clock, out = FakeClock(), io.StringIO()
    seen = []
    for item in track(["a", "b"], "items", mode="lines", seconds=0, stream=out, clock=clock):
        seen.append((item, lines_of(out)[:]))
        clock.now += 1
    assert seen == [("a", []), ("b", ["items: 1/2 (50%)  elapsed 1s  eta 1s"])]
    assert lines_of(out)[-1] == "items: 2/2 (100%)  elapsed 2s"


def test_bad_modes_and_rates_are_one_clear_error():
    assert resolve_mode(False) == "lines" and resolve_mode("off") == "off"
    with pytest.raises(ValueError, match="progress mode 'loud' is not one of bar, lines, off"):
        resolve_mode("loud")
    with pytest.raises(ValueError, match="every must be >= 1"):
        Progress(1, "x", every=0)
