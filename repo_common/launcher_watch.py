"""A torchrun worker (training, search, evaluation) ends when the process that launched it is gone.

`torchrun` (and Lightning's own launcher for `devices > 1`) start one worker
process per rank. When the launcher dies without stopping them (killed with
SIGKILL, its node agent lost), the workers would train on and keep writing
checkpoints and logs of a job everyone thinks is dead.

`watch_launcher()`, called first thing in every launched worker (training,
search and evaluation), asks the Linux kernel to SIGKILL this process the moment its parent (the launcher)
exits (`prctl(PR_SET_PDEATHSIG, SIGKILL)`). SIGKILL, not SIGTERM, because
SIGTERM runs Lightning's handler, which broadcasts to the other ranks and can
wait forever for one that is gone, and because a Python-level handler (or a
watchdog thread) cannot run while a rank blocks in a collective holding the
GIL (seen with DDP's buffer broadcast). The worker leaves no message (it
cannot); a checkpoint it was writing may be cut short, and the training
command then refuses it with one line when resuming (resume from the one
before). Without prctl (not Linux) a daemon thread checks the parent pid
twice a second and ends the process with one line on stderr.

A rank that dies while its launcher lives is torchrun's to handle: it stops
the other workers itself. Only processes started by a launcher are watched
(torchrun sets TORCHELASTIC_RUN_ID, Lightning's launcher LOCAL_RANK); a plain
`python -m repo_train fit` from a shell is not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

#: linux/prctl.h
PR_SET_PDEATHSIG = 1
#: Exit status of a worker the fallback watchdog stopped.
EXIT_LAUNCHER_GONE = 1


def launched_worker(environ=os.environ) -> bool:
    """True in a process started by torchrun or by Lightning's launcher."""
    return "TORCHELASTIC_RUN_ID" in environ or "LOCAL_RANK" in environ


def prctl_function():
    """libc's prctl as a ctypes function, or None where there is none (not Linux). Resolved in the parent:
    `find_library` runs a subprocess, which a child between fork and exec must not do."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal(signum: int, prctl=None) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum) (with `prctl` from `prctl_function`, or resolved now); False where that is
    not available."""
    prctl = prctl or prctl_function()
    return prctl is not None and prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def _stop(parent: int) -> None:
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "?"))
    message = (
        f"repo_train: the launcher of this worker (rank {rank}, launcher pid {parent}) is gone; stopping this "
        "worker now so that the dead job writes nothing more (rerun the command to resume: training from its last "
        "complete checkpoint, search and evaluation from their saved state)\n"
    )
    try:
        os.write(sys.stderr.fileno(), message.encode())
    except (OSError, ValueError):
        pass
    os._exit(EXIT_LAUNCHER_GONE)


def watch_launcher(poll_s: float = 0.5, environ=os.environ) -> str | None:
    """In a launched worker, end this process with its launcher; returns how ("pdeathsig", "thread") or None."""
    if not launched_worker(environ) or os.name != "posix":
        return None
    parent = os.getppid()
    if set_parent_death_signal(signal.SIGKILL):
        if os.getppid() != parent:  # the launcher died between the two calls
            _stop(parent)
        if parent == 1:  # already orphaned before we got here
            _stop(parent)
        return "pdeathsig"
    if parent == 1:
        _stop(parent)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                _stop(parent)

    threading.Thread(target=watch, name="repo_train-launcher-watch", daemon=True).start()
    return "thread"
