"""Where a command may write: the one rule every command line checks before its first write.

A command writes only into a path that is missing, an empty directory, or one
that holds its own earlier output for the same run, recognised by that
output's manifest (evaluation: `run.json`; search: `NAME.state.json` with
`--resume`; export: `export.json`; search diagnose: `structure.json`).
Anything else (a user's folder with their own files, an unrelated JSON file at
a scale file's path, another model's HF directory) is refused before anything
is written, in one line that names the path and the option to choose another.

The checks only read; they raise `OutputRefused` (a ValueError: the command
lines print it as one line, exit code 2). An empty path (`--out ''`, which
would mean the current directory) is refused as well.

Stdlib only, so a refusal needs no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

#: Files a command's own machinery may leave in an output directory without it being "someone else's":
#: lock files (`*.lock`) of a run that died, and hidden staging leftovers of an atomic write (`.NAME.*.tmp`).
_HOUSEKEEPING_SUFFIXES = (".lock",)


class OutputRefused(ValueError):
    """An output path that holds something this command did not write (or no path at all)."""


def require_path(value: str | os.PathLike | None, option: str = "--out") -> Path:
    """`value` as a Path; an empty or blank one (which would mean the current directory) is refused."""
    if value is None or not str(value).strip():
        raise OutputRefused(
            f"{option} is empty: pass a path (an empty {option} would write into the current directory)"
        )
    return Path(value)


def check_parents(path: Path, option: str = "--out", fix: str | None = None) -> None:
    """The nearest existing folder above `path` must be a directory that can be written: under a file nothing
    can be created, and a refusal now beats an OSError at the first write (after the work). `fix` replaces
    the default advice when the parent is a file."""
    folder = path.absolute().parent
    existing = folder
    while not (existing.exists() or existing.is_symlink()) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        made = "" if existing == folder else f", so {folder} cannot be made"
        raise OutputRefused(
            f"{option} {path}: {existing} is a file, not a directory{made}; {fix or f'pass another {option}'}"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "it is on a read-only file system" if _read_only(existing) else "permission denied"
        raise OutputRefused(
            f"{option} {path}: {existing} cannot be written ({why}); pass an {option} in a directory you can write to"
        )


def _read_only(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (where no permission change would help)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def foreign_entries(directory: Path, ours: Iterable[str] = ()) -> list[str]:
    """Names in `directory` other than `ours`, lock files and hidden staging files (sorted)."""
    return sorted(
        entry.name
        for entry in directory.iterdir()
        if entry.name not in set(ours)
        and not entry.name.endswith(_HOUSEKEEPING_SUFFIXES)
        and not (entry.name.startswith(".") and entry.name.endswith((".tmp", ".old")))
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check_output_directory(
    out: str | os.PathLike | None,
    manifest: str,
    what: str,
    *,
    option: str = "--out",
    is_ours: Callable[[Path], bool] | None = None,
    fix: str | None = None,
    replaced_whole: bool = False,
    written: Callable[[Path], Iterable[str]] | None = None,
) -> Path:
    """Refuse `out` unless it is missing, an empty directory, or holds this command's `manifest` file.

    `is_ours(directory)` may check the manifest further (its content names this kind of output);
    `what` names the output in messages ("an evaluation run directory"); `fix` replaces the default advice.
    `replaced_whole`: the command replaces the directory itself (`repo_common.atomic.atomic_directory`), so a
    symbolic link there is refused too (the link, not its target, would be replaced). `written(directory)`: the
    names the earlier output's manifest says the command wrote; anything else beside them is refused, since
    replacing the output would delete it. Returns `out` as a Path.
    Reads only.
    """
    path = require_path(out, option)
    advice = fix or f"pass another {option} (a new or empty directory, or the directory of the run to continue)"
    if path.is_symlink() and (replaced_whole or not path.exists()):
        raise OutputRefused(f"{option} {path} is a symbolic link: pass the real directory path (or a new one)")
    if not path.exists():
        check_parents(path, option)
        return path
    if not path.is_dir():
        raise OutputRefused(f"{option} {path} is a file, not a directory; {advice}")
    foreign = foreign_entries(path)
    if not foreign:
        return path
    if (path / manifest).is_file() and (is_ours is None or is_ours(path)):
        extra = foreign_entries(path, {manifest, *written(path)}) if written is not None else []
        if extra:
            raise OutputRefused(
                f"{option} {path} holds files this command did not write ({_listing(extra)}), which replacing "
                f"its earlier output would delete: move them out, or {advice}"
            )
        return path
    reason = f"has no {manifest}" if not (path / manifest).is_file() else f"its {manifest} is not {what}'s"
    raise OutputRefused(
        f"{option} {path} is a non-empty directory that this command did not write ({_listing(foreign)}; {reason}, "
        f"so it is not {what}): it is left as it is; {advice}"
    )


def check_output_file(
    path: str | os.PathLike | None,
    what: str,
    *,
    option: str = "--out",
    ours: bool = False,
    fix: str | None = None,
) -> Path:
    """Refuse an existing file at `path` unless `ours` (the caller recognised it as its own run's output).

    Returns `path` as a Path. Reads only.
    """
    target = require_path(path, option)
    advice = fix or f"pass another {option}, or delete {target} if it is no longer needed"
    if target.is_dir():
        raise OutputRefused(f"{option} {target} is a directory, not a file; {advice}")
    if (target.exists() or target.is_symlink()) and not ours:
        raise OutputRefused(f"{target} exists and is not {what} of this run: nothing was written; {advice}")
    check_parents(target, option)
    return target
