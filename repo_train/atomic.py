"""Atomic writes of output files: a reader (or a crash) never sees half a file.

Every output the project writes (summaries, scale files, logs, reports, plots)
goes through a temporary file in the target's directory, then `os.replace`,
which is atomic on POSIX file systems. The temporary file is removed if the
write fails. `tempfile.mkstemp` creates files readable by their owner only;
the finished file gets the permissions a plain `open(path, "w")` would give
(0o666 minus the umask), so shared result directories stay readable.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path next to `path`; written by the caller, moved onto `path` when the block succeeds.

    The parent directory is created. `suffix` matters to writers that infer the
    format from the name (matplotlib: ".png").
    """
    path = Path(path)
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
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return Path(path)
