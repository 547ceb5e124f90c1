"""Progress that reads well on a terminal and in a log file.

On a terminal a tqdm bar redraws itself in place. Sent to a file (the
quickstart's OUT/logs/, CI, a batch scheduler) the same bar becomes a line
fragment per redraw, and Rich's bar prints nothing until the end: a long run
then says nothing for many minutes. `Progress` draws a tqdm bar only when its
stream is a terminal; otherwise it writes one plain line every `every` items
or `seconds` seconds, whichever comes later:

    kv / baseline: 12/40 (30%)  elapsed 1m02s  eta 2m25s  loss 4.368

A task that ends before the first line is due stays silent, so short runs
(and their tests) print nothing extra; once a line was written, the last item
writes a closing line with the total time.

Modes (`progress=` of the callers): True / "bar" = a bar on a terminal, lines
elsewhere; False / "lines" = lines only (a `--no_progress` run still needs its
log lines, they cost nothing); "off" = nothing (a loop inside one that reports).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

from tqdm.auto import tqdm

#: A plain line at most this often (seconds) and ...
DEFAULT_SECONDS = 10.0
#: ... after at least this many items.
DEFAULT_EVERY = 1

MODES = ("bar", "lines", "off")

T = TypeVar("T")


def resolve_mode(progress: bool | str) -> str:
    """True -> "bar", False -> "lines", or one of MODES as given."""
    if progress is True:
        return "bar"
    if progress is False:
        return "lines"
    if progress not in MODES:
        raise ValueError(f"progress mode {progress!r} is not one of {', '.join(MODES)} (or True / False)")
    return progress


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is an interactive terminal (a closed or fake stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def format_duration(seconds: float) -> str:
    """42s, 1m02s, 3h07m: short enough for a log line, seconds dropped past an hour."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_value(value: Any) -> str:
    """Floats with 4 significant digits (a loss of 4.368, an lr of 0.002942), whole from 1000 on (no 1.064e+04)."""
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def progress_line(
    desc: str, count: int, total: int | None, elapsed: float, eta: float | None, fields: dict[str, Any]
) -> str:
    """`desc: count/total (pct)  elapsed ...  eta ...  name value ...` (no total: no pct, no eta)."""
    head = f"{desc}: {count}/{total} ({100 * count / total:.0f}%)" if total else f"{desc}: {count}"
    parts = [head, f"elapsed {format_duration(elapsed)}"]
    if eta is not None:
        parts.append(f"eta {format_duration(eta)}")
    parts += [f"{name} {format_value(value)}" for name, value in fields.items()]
    return "  ".join(parts)


class Progress:
    """Counts items towards `total`; shows them as a bar on a terminal, as plain lines elsewhere."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        unit: str = "it",
        initial: int = 0,
        mode: bool | str = True,
        every: int = DEFAULT_EVERY,
        seconds: float = DEFAULT_SECONDS,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """
        Args:
            total: items to do (None = unknown: no percentage, no ETA).
            desc: what is counted, the start of every line.
            unit: tqdm's unit name (bar only).
            initial: items already done (a resumed run); the ETA uses the rate of this run only.
            mode: True/"bar", False/"lines" or "off" (see the module docstring).
            every: a line after at least this many items since the last one ...
            seconds: ... and at least this many seconds since the last one (or the start).
            stream: where to write (default: sys.stderr at construction).
            clock: time source (tests pass a fake one).
        """
        if every < 1 or seconds < 0:
            raise ValueError(f"progress: every must be >= 1 and seconds >= 0, got every={every}, seconds={seconds}")
        self.total, self.desc, self.every, self.seconds = total, desc, every, seconds
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        mode = resolve_mode(mode)
        if mode == "bar" and not is_terminal(self.stream):
            mode = "lines"
        self.mode = mode
        self.count = self.initial = initial
        self.fields: dict[str, Any] = {}
        self.lines_written = 0
        self._start = self._last_time = clock()
        self._last_count = initial
        self._bar = None
        if mode == "bar":
            self._bar = tqdm(total=total, desc=desc, unit=unit, initial=initial, file=self.stream, dynamic_ncols=True)

    def update(self, n: int = 1, **fields: Any) -> None:
        """`n` more items done; `fields` (e.g. loss=...) are shown from now on."""
        self.set(self.count + n, **fields)

    def set(self, count: int, **fields: Any) -> None:
        """The count is now `count` (an absolute counter such as the optimizer step)."""
        self.fields.update(fields)
        if self._bar is not None:
            if fields:
                self._bar.set_postfix({k: format_value(v) for k, v in self.fields.items()}, refresh=False)
            self._bar.update(count - self.count)
            self.count = count
            return
        self.count = count
        if self.mode != "lines":
            return
        now = self.clock()
        due = count - self._last_count >= self.every and now - self._last_time >= self.seconds
        finished = self.total is not None and count >= self.total and count > self._last_count
        if due or (finished and (self.lines_written or now - self._start >= self.seconds)):
            self._line(now)

    def line_now(self) -> None:
        """Write the current state now, whatever the interval ("lines" mode): e.g. after a run's first training
        step, whose time and ETA a user wants to see before `seconds` have passed."""
        if self.mode == "lines":
            self._line(self.clock())

    def line(self) -> str:
        """The current state as one plain line."""
        return self._format(self.clock())

    def write(self, message: str) -> None:
        """A message between progress output (above the bar on a terminal); nothing when the mode is "off"."""
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        elif self.mode == "lines":
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:  # noqa: PYI034 (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _format(self, now: float) -> str:
        elapsed = now - self._start
        done = self.count - self.initial
        eta = None
        if self.total is not None and done > 0 and elapsed > 0 and self.count < self.total:
            eta = max(0, self.total - self.count) * elapsed / done
        return progress_line(self.desc, self.count, self.total, elapsed, eta, self.fields)

    def _line(self, now: float) -> None:
        print(self._format(now), file=self.stream, flush=True)
        self.lines_written += 1
        self._last_time, self._last_count = now, self.count


def track(iterable: Iterable[T], desc: str, total: int | None = None, **options: Any) -> Iterator[T]:
    """Yield the items of `iterable`, counting each one done when the next is asked for (options: `Progress`)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    with Progress(total, desc, **options) as progress:
        for item in iterable:
            yield item
            progress.update()
