"""Atomic writes of output files: a reader (or a crash) never sees half a file.

Every output the project writes (summaries, scale files, logs, reports, plots)
goes through a temporary file in the target's directory, then `os.replace`,
which is atomic on POSIX file systems. The temporary file is removed if the
write fails. `tempfile.mkstemp` creates files readable by their owner only;
the finished file gets the permissions a plain `open(path, "w")` would give
(0o666 minus the umask), so shared result directories stay readable.

A whole output directory (an exported model) is written the same way by
`atomic_directory`: built in a hidden staging directory next to the target,
given ordinary permissions (files 0o666, directories 0o777, minus the umask),
then moved into place; on any failure the staging directory is removed.

A write that fails without naming a file (a full disk on write/flush/fsync) is
re-raised naming the file being written (`writing_to`), for every atomic
writer here and for appends that use `writing_to` themselves.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _default_mode() -> int:
    return 0o666 & ~_umask()


def apply_default_permissions(root: str | os.PathLike) -> None:
    """Give `root` and everything under it the permissions plain `open`/`mkdir` would (the umask's)."""
    root = Path(root)
    file_mode, dir_mode = _default_mode(), 0o777 & ~_umask()
    for directory, _, files in os.walk(root):
        os.chmod(directory, dir_mode)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, file_mode)


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """A staging directory next to `path`, filled by the caller, moved onto `path` when the block succeeds.

    An existing `path` directory is replaced only then (moved aside, then
    deleted), so a failed or interrupted write leaves the old one as it was.
    Missing parent directories are created, and removed again on failure if
    they stayed empty. OSError while creating the staging directory (a
    read-only or unwritable place) propagates before anything was written.
    """
    path = Path(path)
    created = []
    parent = path.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _clean_abandoned(path)
        staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=_staging_prefix(path), suffix=".tmp"))
    except BaseException:
        _remove_empty(created)
        raise
    old = None
    try:
        with writing_to(path):  # a library's full disk (safetensors, torch) as the OSError every command reports
            yield staging
        apply_default_permissions(staging)
        if path.is_dir() and not path.is_symlink():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=_staging_prefix(path), suffix=".old"))
            os.replace(path, old / path.name)
        os.replace(staging, path)
    except BaseException:
        if old is not None and (old / path.name).exists() and not path.exists():
            os.replace(old / path.name, path)  # put the earlier directory back
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            _remove_empty([old])  # only if the earlier directory went back
        _remove_empty(created)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _staging_prefix(path: Path) -> str:
    """`.NAME.pidPID@HOST.`: a staging directory says which process made it, so a later write to the same path
    can tell one left by a killed process (`kill -9`, a lost node) from one in use."""
    return f".{path.name}.pid{os.getpid()}@{socket.gethostname()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _clean_abandoned(path: Path) -> None:
    """Remove the staging directories a killed writer of `path` left beside it (on this host, its process gone);
    an abandoned `.old` that still holds the earlier `path` (killed between the two renames) is put back first."""
    pattern = re.compile(re.escape(f".{path.name}.pid") + r"(\d+)@(.+?)\.[^.]+\.(tmp|old)$")
    host = socket.gethostname()
    for sibling in path.parent.iterdir():
        found = pattern.match(sibling.name)
        if not found or found.group(2) != host or _alive(int(found.group(1))) or not sibling.is_dir():
            continue
        earlier = sibling / path.name
        if found.group(3) == "old" and earlier.is_dir() and not path.exists():
            os.replace(earlier, path)
        shutil.rmtree(sibling, ignore_errors=True)


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:  # innermost first
        try:
            directory.rmdir()
        except OSError:
            return


#: What to do when a write fails with this errno (others: check the place can be written).
WRITE_FIXES = {
    errno.ENOSPC: "free space on that disk (or write elsewhere) and rerun: the outputs written so far are kept",
    errno.EDQUOT: "free space within your disk quota (or write elsewhere) and rerun: the outputs so far are kept",
    errno.EROFS: "the file system is read-only: write the outputs elsewhere",
    errno.ENAMETOOLONG: "the path is longer than the file system allows: choose a shorter one",
}


@contextmanager
def writing_to(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise an OSError of the block that names no file (a full disk on write/flush/fsync) naming `path`.

    `[Errno 28] No space left on device` alone does not say which of a run's
    files could not be written; the re-raised error (same errno, still an
    OSError) says `... while writing PATH; FIX`.
    """
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        fix = WRITE_FIXES.get(err.errno, "check that it can be written")
        reason = err.strerror or str(err) or type(err).__name__
        raise OSError(err.errno, f"{reason} while writing {path}; {fix}") from err
    except Exception as err:
        if not library_full_disk(err):
            raise
        reason = f"No space left on device ({type(err).__name__}: {str(err).strip().splitlines()[0][:120]})"
        raise OSError(errno.ENOSPC, f"{reason} while writing {path}; {WRITE_FIXES[errno.ENOSPC]}") from err


#: How libraries that write files without raising OSError report a full disk: safetensors' SafetensorError
#: quotes the OS ("No space left on device"); torch's zip writer sees fewer bytes taken than it wrote
#: ("[enforce fail at inline_container.cc:...] . unexpected pos N vs M").
_FULL_DISK_WORDS = ("No space left on device", "Disk quota exceeded", "unexpected pos")


def library_full_disk(err: BaseException) -> bool:
    """Whether `err`, not an OSError, is a library's own report of a write the disk could not hold."""
    return not isinstance(err, OSError) and any(words in str(err) for words in _FULL_DISK_WORDS)


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path next to `path`; written by the caller, moved onto `path` when the block succeeds.

    The parent directory is created; a failed write names `path` (`writing_to`).
    `suffix` matters to writers that infer the format from the name (matplotlib: ".png").
    """
    path = Path(path)
    with writing_to(path):  # a full disk names `path`
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            os.chmod(tmp, _default_mode())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str, *, fsync: bool = False) -> Path:
    """Write `text` (UTF-8) to `path` atomically; `fsync` also forces it to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    return Path(path)


def write_json_atomic(path: str | os.PathLike, data: Any, *, indent: int = 1, fsync: bool = False) -> Path:
    """`data` as JSON (strict: NaN/inf are an error, not invalid JSON), newline-terminated, written atomically."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    return write_text_atomic(path, text, fsync=fsync)


def save_figure_atomic(fig, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically and close it (also when saving fails)."""
    import matplotlib.pyplot as plt  # heavy: matplotlib, only for a figure

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return Path(path)
