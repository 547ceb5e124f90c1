"""Starting a process that a test will Ctrl-C (SIGINT), whatever the test run's own SIGINT disposition.

A job started in the background by a non-interactive shell (`cmd &`, nohup, some CI runners) inherits
SIGINT ignored, and Python then installs no KeyboardInterrupt handler: a test's SIGINT would do nothing and
the test would fail for a reason of its launcher. A terminal's foreground process, which these tests stand
for, has SIGINT at its default; the child gets that back before it starts.
"""

from __future__ import annotations

import signal


def sigint_as_in_a_terminal() -> None:
    """`preexec_fn` for a process the test interrupts: SIGINT at its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
