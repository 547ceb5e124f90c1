"""Rewrite repo_train/help_snapshot.json from the live `python -m repo_train fit --help` / `--print_config`
and the live `fit` / `validate` parsers' options (`repo_train.fit_precheck`).

    python scripts/regenerate_help_snapshot.py

Starts LightningCLI five times (each question with stdout a pipe and a terminal, and once to read the
parsers; ~20 s each on two loaded cores). Needed after a change to repo_train/ or repo_common/ or an upgrade of the packages the key names
(`repo_train.help_snapshot`); until then `fit` / `validate` answer live, as slowly as before.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repo_common.atomic import write_json_atomic
from repo_common.config_cli import ConfigParser, parse_script
from repo_train.help_snapshot import SNAPSHOT, live_snapshot

PROG = "scripts/regenerate_help_snapshot.py"


def main(argv: list[str] | None = None) -> int:
    # no options; parsed so that `--help` answers (and a stray argument is refused) instead of rewriting the file
    parse_script(ConfigParser.for_command(PROG, __doc__), argv)
    write_json_atomic(SNAPSHOT, live_snapshot())
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
