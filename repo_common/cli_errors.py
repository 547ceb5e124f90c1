"""How the project's command lines (repo_train, evaluation, search) report a user's mistake.

One line on stderr, `python -m PKG CMD: error: MESSAGE` (argparse's own
format), no traceback, and exit code 2 (argparse's usage-error code).
Parsers' own errors (a bad option value, a missing option) are one line too:
`repo_common.config_cli.ConfigParser`. (A failed write naming its file:
`repo_common.atomic.writing_to`.) A PermissionError is always the user's
environment, never a bug: every command says it as "cannot read PATH:
permission denied (why); fix" (`repo_common.file_permissions`); a full disk, a read-only file
system or a path too long is one line with its fix too, whatever the command (`repo_common.atomic.WRITE_FIXES`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from repo_common.atomic import WRITE_FIXES
from repo_common.file_permissions import describe

#: Exit code of a usage error, as argparse uses it.
EXIT_USAGE = 2


def report_user_errors(prog: str, action: Callable[[], int], errors: tuple[type[Exception], ...]) -> int:
    """`action()`'s exit code; one of `errors` instead prints `PROG: error: MESSAGE` to stderr and gives 2.

    `prog` names the command, e.g. "python -m search run"; `errors` are the
    exception types that mean a user mistake for this command line (anything
    else is a bug and keeps its traceback), PermissionError always among them.
    """
    try:
        return action()
    except PermissionError as err:
        print(f"{prog}: error: {describe(err)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        if err.errno not in WRITE_FIXES and not isinstance(err, errors):
            raise
        print(f"{prog}: error: {environment_message(err)}", file=sys.stderr)
        return EXIT_USAGE
    except errors as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


def environment_message(err: OSError) -> str:
    """One line for an OSError: its message, and for a full disk, a read-only file system or a too-long path,
    the fix (the file it names is the one being written)."""
    fix = WRITE_FIXES.get(err.errno)
    if fix is None:
        return str(err)
    if err.filename is None and "while writing" in (err.strerror or ""):
        return err.strerror  # `repo_common.atomic.writing_to` named the file and the fix already
    where = f"cannot write {err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or first_line(err)}; {fix}"


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of `err`'s message (its type's name when it has none), cut at `limit` characters: a
    library's multi-line message as the detail inside one line of ours."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:limit]
