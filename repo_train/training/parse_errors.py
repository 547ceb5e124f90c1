"""jsonargparse's parse errors of `fit` / `validate` as the project's one line (no torch, no Lightning).

Used by training/cli.py, which words a data source's or the position's errors
itself, since those name classes.
"""

from __future__ import annotations

import re

#: The longest option message kept whole (a union's every member may be listed).
MAX_LINE = 400


def parse_error_line(message: str, subcommand: str | None) -> str:
    """jsonargparse's (often multi-line) parse error as one line, with where to look up the options."""
    text = message.strip()
    key = re.match(r'Parser key "([^"]+)":\s*(.*)', text, re.DOTALL)
    if text.startswith("Unexpected config:"):
        got = " ".join(text.split(":", 1)[1].split())
        line = f"the config is not a YAML mapping of sections (seed_everything, trainer, model, data, ...); got: {got}"
    elif text.startswith("Problems parsing config:"):
        line = f"the config is not valid YAML: {' '.join(text.split(':', 1)[1].split())}"
    elif key and key.group(1) == "config":
        line = f"--config: {' '.join(key.group(2).split())}"
    elif key:
        name, rest = key.groups()
        got = re.search(r"(?:Got value|Given value): (.*)", rest)
        expected = [
            re.sub(r"<class '([\w.]+)'>", r"\1", e).strip()
            for e in re.findall(r"Expected a (.+?)(?:\. Got value:.*)?$", rest, re.MULTILINE)
        ]
        line = f"--{name}: " + (f"{got.group(1).strip()!r} is not valid" if got else " ".join(rest.split()))
        if expected:
            line += f" (expected {' or '.join(expected)})"
    else:
        line = " ".join(text.split())
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 3] + "..."
    command = f"python -m repo_train {subcommand}" if subcommand else "python -m repo_train fit"
    return f"{line} ({command} --help lists the options)"
