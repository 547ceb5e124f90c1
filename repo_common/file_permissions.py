"""A file that exists but this user may not read (or a folder it may not enter or write): one line naming it.

Never "No such file or directory" for a file that is there, and never a
PermissionError traceback: `permission_message` turns any PermissionError
with a file name into "cannot read PATH: permission denied (why); fix", and
`check_readable` / `check_files_readable` open files before a library (torch,
safetensors, transformers) reads them and words its own failure vaguely.
Stdlib only: the command lines import it before any heavy package.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path


def _blocked_folder(path: Path) -> Path | None:
    """The first folder above `path` this user may not enter (no search permission), or None."""
    for folder in reversed(path.absolute().parents):
        if not os.access(folder, os.X_OK):
            return folder
    return None


def _mode(path: Path) -> str:
    """ "mode 0o640, owner uid 1000" of `path`, or "" when even that cannot be read."""
    try:
        info = path.stat()
    except OSError:
        return ""
    return f"mode {stat.S_IMODE(info.st_mode):#05o}, owner uid {info.st_uid}"


def permission_message(path: str | os.PathLike) -> str:
    """One line for a PermissionError on `path`: what cannot be done to it, why, and the fix."""
    path = Path(path)
    blocked = _blocked_folder(path)
    if blocked is not None:
        return (
            f"cannot read {path}: permission denied (this user may not enter the folder {blocked}); "
            f"give it access (e.g. chmod a+rx {blocked}), or copy the file somewhere it can read"
        )
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            return (
                f"cannot read {path}: permission denied (a folder this user may not list or enter, {_mode(path)}); "
                f"give it access (e.g. chmod a+rx {path}), or copy it somewhere it can read"
            )
        return (
            f"cannot write in {path}: permission denied (a folder this user may not write, {_mode(path)}); "
            "choose another output path, or give it write access"
        )
    if path.exists() and not os.access(path, os.R_OK):
        return (
            f"cannot read {path}: permission denied ({_mode(path)}); give this user read access (e.g. chmod a+r "
            f"{path}), or run as its owner"
        )
    if path.exists():
        return f"cannot write {path}: permission denied ({_mode(path)}); choose another path, or give it write access"
    return (
        f"cannot create {path}: permission denied (this user may not write in {path.parent}); choose another "
        "output path, or give it write access"
    )


def describe(err: PermissionError) -> str:
    """The one line for `err`: `permission_message` of its file, or its own text when it names none."""
    if err.filename is None:
        return str(err)
    return permission_message(err.filename)


def check_readable(path: str | os.PathLike) -> None:
    """Open `path` for reading (and close it), so that a file this user may not read is a PermissionError whose
    text is `permission_message`, before a library that reports it vaguely reads it. Missing files pass."""
    try:
        with open(path, "rb"):
            pass
    except PermissionError as err:
        raise PermissionError(permission_message(path)) from err
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return


def check_files_readable(paths: Iterable[str | os.PathLike]) -> None:
    """`check_readable` of each path."""
    for path in paths:
        check_readable(path)


def check_folder_listable(directory: str | os.PathLike) -> None:
    """The folder `directory` can be listed and entered (else a search in it finds nothing and says "no such
    file"): a PermissionError naming it otherwise."""
    try:
        os.scandir(directory).close()
    except PermissionError as err:
        raise PermissionError(permission_message(directory)) from err
    except (FileNotFoundError, NotADirectoryError):
        return


def check_folder_readable(directory: str | os.PathLike) -> None:
    """The folder `directory` can be listed and entered, and every file directly in it read (a model directory:
    config.json, weights, tokenizer files): else a PermissionError naming the first that cannot."""
    directory = Path(directory)
    try:
        entries = sorted(directory.iterdir())
    except PermissionError as err:
        raise PermissionError(permission_message(directory)) from err
    except (FileNotFoundError, NotADirectoryError):
        return
    check_files_readable(entry for entry in entries if entry.is_file())
