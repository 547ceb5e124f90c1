"""How the project's command lines (repo_train, evaluation, search) report a user's mistake.

One line on stderr, `python -m PKG CMD: error: MESSAGE` (argparse's own
format), no traceback, and exit code 2 (argparse's usage-error code).
`OneLineArgumentParser` makes argparse's own errors (a bad option value, a
missing option) that one line too, instead of the whole usage block, and
`writing_to(path)` makes a failed write (a full disk) name the file it was
writing.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Exit code of a usage error, as argparse uses it.
EXIT_USAGE = 2


def report_user_errors(prog: str, action: Callable[[], int], errors: tuple[type[Exception], ...]) -> int:
    """`action()`'s exit code; one of `errors` instead prints `PROG: error: MESSAGE` to stderr and gives 2.

    `prog` names the command, e.g. "python -m search run"; `errors` are the
    exception types that mean a user mistake for this command line (anything
    else is a bug and keeps its traceback).
    """
    try:
        return action()
    except errors as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, `PROG: error: MESSAGE (see PROG --help)`, exit code 2.

    Subparsers made by `add_subparsers().add_parser` are of this class too (argparse's default).
    """

    def error(self, message: str):
        message = " ".join(message.split())
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: What to do when a write fails with this errno (others: check the place can be written).
_WRITE_FIXES = {
    errno.ENOSPC: "free space on that disk (or write elsewhere) and rerun: the outputs written so far are kept",
    errno.EDQUOT: "free space within your disk quota (or write elsewhere) and rerun: the outputs so far are kept",
    errno.EROFS: "the file system is read-only: write the outputs elsewhere",
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
        fix = _WRITE_FIXES.get(err.errno, "check that it can be written")
        reason = err.strerror or str(err) or type(err).__name__
        raise OSError(err.errno, f"{reason} while writing {path}; {fix}") from err
