"""The result table of `check-gpu`: one row per check, the tolerance rule, the exit code, the table's text.

Every check returns `Row`s. A measured row passes when its value is within its
threshold (`within`), a row that could not run for a stated reason (flash-attn
not installed) is a skip, and a check that raised is a failed row carrying the
error's one-line message (`guarded`), so one broken path never hides the others.
The exit code is 0 only when no row failed: skips are stated, not failures.
`chosen` reads the options that name checks and methods (`--checks`, `--methods`).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PASS, FAIL, SKIP = "pass", "fail", "skip"
RESULTS = (PASS, FAIL, SKIP)
COLUMNS = ("check", "result", "measured", "threshold", "note")


@dataclass(frozen=True)
class Row:
    """One line of the table: what was checked, pass/fail/skip, the measured value and the limit it was held to."""

    name: str
    result: str
    measured: str = ""
    threshold: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.result not in RESULTS:
            raise ValueError(f"row {self.name!r}: result must be one of {RESULTS}, got {self.result!r}")


def relative_difference(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| over the finite entries of `expected` (float64, on the CPU).

    Machine-independent: a difference is measured against the scale of the
    values, not per element. Non-finite entries (masked logits) must match in
    place and value; a mismatch, or a shape mismatch, is an infinite difference.
    """
    import torch  # heavy: keeps --help fast

    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.shape != e.shape:
        return math.inf
    finite = torch.isfinite(e)
    if not torch.equal(torch.isfinite(a), finite) or not torch.equal(a[~finite], e[~finite]):
        return math.inf
    if not bool(finite.any()):
        return 0.0
    scale = e[finite].abs().max().item()
    drift = (a[finite] - e[finite]).abs().max().item()
    if scale == 0.0:
        return 0.0 if drift == 0.0 else math.inf
    return drift / scale


def within(name: str, value: float, limit: float, note: str = "", *, unit: str = "of max |ref|") -> Row:
    """A row that passes when `value <= limit` (a NaN value fails)."""
    ok = value <= limit  # NaN compares False
    return Row(name, PASS if ok else FAIL, f"{value:.3g}", f"<= {limit:g} {unit}".strip(), note)


def at_least(name: str, value: float, limit: float, note: str = "", *, unit: str = "") -> Row:
    """A row that passes when `value >= limit` (a NaN value fails)."""
    ok = value >= limit
    return Row(name, PASS if ok else FAIL, f"{value:.4g}", f">= {limit:g} {unit}".strip(), note)


def skip(name: str, reason: str) -> Row:
    return Row(name, SKIP, note=reason)


def error_line(err: BaseException) -> str:
    """An exception as one line: its type, its message squashed, and where in the project it was raised."""
    message = " ".join(str(err).split()) or "(no message)"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "site-packages" not in f.filename]
    where = f" [{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}]" if frames else ""
    return f"{type(err).__name__}: {message}{where}"


def guarded(name: str, check: Callable[[], Sequence[Row]]) -> list[Row]:
    """`check()`'s rows, or one failed row named `name` with the error when it raises."""
    try:
        return list(check())
    except Exception as err:  # noqa: BLE001  (a broken GPU path is a result of this command, not a crash of it)
        return [Row(name, FAIL, note=error_line(err))]


def exit_code(rows: Sequence[Row]) -> int:
    """0 when every row passed or was skipped (and there is at least one row), else 1."""
    return 0 if rows and all(row.result != FAIL for row in rows) else 1


def render_table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (readable in a terminal, pastable into an issue), then a one-line count."""
    cells = [list(COLUMNS)] + [[r.name, r.result.upper(), r.measured, r.threshold, r.note] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    counts = {result: sum(r.result == result for r in rows) for result in RESULTS}
    verdict = "all checks passed" if exit_code(rows) == 0 else "SOME CHECKS FAILED"
    lines.append(f"\n{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped: {verdict}")
    return "\n".join(lines)


def chosen(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    """The names of a comma-separated option, in order, each checked against `allowed` (a ValueError names the bad)."""
    names = list(dict.fromkeys(name.strip() for name in str(text).split(",") if name.strip()))
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise ValueError(f"{option} {text!r}: {'unknown ' + str(unknown) if unknown else 'empty'}; "
                         f"choose comma-separated names from {list(allowed)}")  # fmt: skip
    return names
