"""Starting a process that a test will Ctrl-C (SIGINT), whatever the test run's own SIGINT disposition.

A job started in the background by a non-interactive shell (`cmd &`, nohup, some CI runners) inherits
SIGINT ignored, and Python then installs no KeyboardInterrupt handler: a test's SIGINT would do nothing and
the test would fail for a reason of its launcher. A terminal's foreground process, which these tests stand
for, has SIGINT at its default; the child gets that back before it starts.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

#: `fit`'s progress line (with `--progress_log.every_n_steps 1 --progress_log.every_seconds 0`: one a step).
STEP_LINE = re.compile(r"train step: (\d+)/")


def sigint_as_in_a_terminal() -> None:
    """`preexec_fn` for a process the test interrupts: SIGINT at its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fit_with_signal(
    command: list[str], cwd: Path, env: Mapping[str, str], send: signal.Signals | None, after_step: int
) -> tuple[int, str]:
    """(exit code, stderr) of a `fit` command; with `send`, that signal once its progress shows `after_step`."""
    process = subprocess.Popen(
        command, cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_as_in_a_terminal,  # noqa: PLW1509 (one signal call)
    )  # fmt: skip
    watchdog = threading.Timer(300, process.kill)
    watchdog.start()
    lines, sent = [], False
    try:
        for line in process.stderr:
            lines.append(line)
            step = STEP_LINE.match(line)
            if send is not None and not sent and step and int(step.group(1)) >= after_step:
                process.send_signal(send)
                sent = True
        return process.wait(), "".join(lines)
    finally:
        watchdog.cancel()
