"""How the project's command lines (repo_train, evaluation, search) report a user's mistake.

One line on stderr, `python -m PKG CMD: error: MESSAGE` (argparse's own
format), no traceback, and exit code 2 (argparse's usage-error code).
Parsers' own errors (a bad option value, a missing option) are one line too:
`repo_common.config_cli.ConfigParser`. (A failed write naming its file:
`repo_common.atomic.writing_to`.) A PermissionError is always the user's
environment, never a bug: every command says it as "cannot read PATH:
permission denied (why); fix" (`repo_common.file_permissions`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

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
    except errors as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of `err`'s message (its type's name when it has none), cut at `limit` characters: a
    library's multi-line message as the detail inside one line of ours."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:limit]
