"""One writer per output: a lock file naming the owner's pid and host.

A run directory (evaluation `--out`, a search's scale file and side files, a
training root dir) is owned by one process at a time. `run_lock(LOCK_FILE)`
holds the lock for the `with` block and releases it on the way out, on
errors too:

- The lock is an exclusive `fcntl.flock` on the lock file, so two starters
  cannot both win (the kernel decides), and the lock dies with its process
  (no stale lock can block a run on the same host). The file holds
  `{"pid", "host", "command", "started"}` for the message a second writer
  gets: `... is in use by pid P on host H (lock file F)`.
- A lock file whose flock is free but which still names an owner was left by
  a process that died without releasing it: on the same host it is taken over
  with a one-line warning. One from another host is refused (that process
  cannot be checked from here, and flock may not reach across hosts on a
  network file system): the message says to delete the file if that run is
  gone.
- Releasing removes the file (only if it is still this lock's file). A
  starter that opened the file just before it was removed notices (the path
  no longer leads to the inode it locked) and tries again.
- Where the file system does not support flock, the pid and host decide
  alone (a starter race is then possible).

Stdlib only, so it loads without torch.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Name of the lock file inside a locked directory.
LOCK_FILE = "run.lock"
#: How long a refused starter waits for the winner to write its pid and host.
_OWNER_WAIT_S = 1.0


class RunLockedError(ValueError):
    """Another process owns the output (a user error: the command lines print it as one line, exit code 2)."""


def _host() -> str:
    return socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _read_owner(fd: int) -> dict | None:
    """The lock file's {"pid", "host", ...}, or None when empty or unreadable."""
    try:
        data = os.pread(fd, 1 << 16, 0)
        owner = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return owner if isinstance(owner, dict) and "pid" in owner else None


def _command_line() -> str:
    """This process's command, as typed: `python -m PKG ...` for a package's __main__."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = f"python -m {program.parent.name}" if program.name == "__main__.py" else program.name
    return " ".join([name, *sys.argv[1:]])[:200]


def _describe(owner: dict | None) -> str:
    if owner is None:
        return "another process (its pid is not recorded yet)"
    return f"pid {owner.get('pid')} on host {owner.get('host', '?')}"


def _flock(fd: int) -> bool | None:
    """True if this call took the lock, False if another process holds it, None if flock is unsupported."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _refuse(what: str, owner: dict | None, lock_file: Path, hint: str) -> RunLockedError:
    running = f", running: {owner['command']}" if owner and owner.get("command") else ""
    return RunLockedError(f"{what} is in use by {_describe(owner)} (lock file {lock_file}{running}); {hint}")


def acquire(lock_file: str | os.PathLike, what: str | None = None, command: str | None = None) -> int:
    """Take the lock (creating the file and its directory); its file descriptor, for `release`.

    `what` names the output in messages (default: the lock file's directory);
    `command` is recorded for the message another starter gets.
    """
    lock_file = Path(lock_file)
    what = what or str(lock_file.parent)
    command = command or _command_line()
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):  # each retry means the previous owner removed the file between our open and flock
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            locked = _flock(fd)
            if locked is False:
                deadline = time.monotonic() + _OWNER_WAIT_S
                owner = _read_owner(fd)
                while owner is None and time.monotonic() < deadline:  # the winner is writing its name
                    time.sleep(0.05)
                    owner = _read_owner(fd)
                raise _refuse(what, owner, lock_file, "wait for that run to finish, or write to another directory")
            if not _same_file(fd, lock_file):
                os.close(fd)
                continue
            previous = _read_owner(fd)
            if previous is not None:
                _take_over(previous, locked, what, lock_file)
            record = {"pid": os.getpid(), "host": _host(), "command": command, "started": time.time()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
            os.fsync(fd)
            return fd
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
    raise RunLockedError(f"could not take the lock file {lock_file}: it keeps being replaced by other processes")


def _take_over(previous: dict, locked: bool | None, what: str, lock_file: Path) -> None:
    """A lock file naming an owner although its flock was free (or flock is unsupported): stale, or refuse."""
    pid, host = previous.get("pid"), previous.get("host")
    if host != _host():
        hint = "that host cannot be checked from here: if no run there writes to it, delete the lock file"
        raise _refuse(what, previous, lock_file, hint)
    running = isinstance(pid, int) and pid != os.getpid() and _alive(pid)
    if locked is None and running:  # no flock to ask: a live pid on this host is taken as the owner
        raise _refuse(what, previous, lock_file, "wait for that run to finish, or write to another directory")
    state = "no longer running" if not running else "running but not holding the lock"
    print(
        f"warning: taking over the stale lock {lock_file} of pid {pid} on host {host} ({state})",
        file=sys.stderr,
        flush=True,
    )


def release(fd: int, lock_file: str | os.PathLike) -> None:
    """Remove the lock file (if it is still this lock's) and drop the lock."""
    lock_file = Path(lock_file)
    try:
        if _same_file(fd, lock_file):
            lock_file.unlink()
    finally:
        os.close(fd)  # closing drops the flock


@contextmanager
def run_lock(lock_file: str | os.PathLike, what: str | None = None, command: str | None = None) -> Iterator[Path]:
    """Hold the lock `lock_file` for the block (see the module doc); yields the lock file's path.

    If the lock file's directory did not exist and is empty when the block
    ends (the run failed or was refused before writing), it is removed again:
    a run that wrote nothing leaves no trace.
    """
    lock_file = Path(lock_file)
    created = not lock_file.parent.exists()
    try:
        fd = acquire(lock_file, what, command)
        try:
            yield lock_file
        finally:
            release(fd, lock_file)
    finally:
        if created:
            try:
                lock_file.parent.rmdir()  # only if empty
            except OSError:
                pass


def locked_directory(directory: str | os.PathLike, what: str | None = None):
    """`run_lock(directory / "run.lock")`: own a run directory for the block (created if needed)."""
    return run_lock(Path(directory) / LOCK_FILE, what or str(directory))
