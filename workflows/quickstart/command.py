"""`python -m workflows quickstart`: check the output directory, take its lock, run the built-in or the loop file's
loop; a user mistake or Ctrl-C is one line (rerunning the same command goes on from where it stopped).
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

from jsonargparse import Namespace

from repo_common.config_cli import ConfigParser
from repo_common.output_guard import check_output_directory, require_path
from repo_common.run_lock import run_lock
from workflows.loop_checks import machine_problems
from workflows.quickstart.loop_file import loop_steps
from workflows.quickstart.options import ROOT, resolve
from workflows.quickstart.tiny_loop import tiny_loop

#: The output directory's lock: one quickstart writes it at a time.
LOCK_NAME = "quickstart.lock"


def run(options: Namespace, parser: ConfigParser) -> int:
    """The command: the checked options (`options.resolve`), then the loop they choose."""
    args = resolve(options, parser)
    check_out(args.out, (ROOT / args.out).resolve())  # a refusal: one line `PROG: error: ...`, exit 2
    out = (ROOT / args.out).resolve() if not Path(args.out).is_absolute() else Path(args.out)
    if args.loop is not None:
        run_config(args, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out / LOCK_NAME, f"quickstart output {out}"):
            tiny_loop(args, out)
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None
    return 0


#: How the second line of a commands.sh that a quickstart began starts (the built-in loop's, a loop file's run and
#: its dry run): a folder holding another commands.sh is a user's, not an earlier quickstart's.
BEGUN_BY_QUICKSTART = ("# The commands this quickstart ran", "# The commands of ", "# Dry run of ")


def check_out(given: str, out: Path) -> None:
    """`--out` is new, empty, or an earlier quickstart's (its steps.json, or the commands.sh a quickstart begins
    before its first step, recognised by its header); another folder, a file or `--out ''` is refused before
    anything is written."""
    require_path(given)
    if not _began_by_quickstart(out / "commands.sh"):
        check_output_directory(out, "steps.json", "a quickstart output directory")


def _began_by_quickstart(script: Path) -> bool:
    """Whether `script` is a commands.sh a quickstart began: its first line a shebang, its second a quickstart's."""
    try:
        with open(script, encoding="utf-8") as handle:
            first, second = handle.readline(4096), handle.readline(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith("#!") and second.startswith(BEGUN_BY_QUICKSTART)


def run_config(args: Namespace, out: Path) -> None:
    """The loop of a config file: each train method through its launcher, export, search, evaluate, report."""
    config = args.loop
    values = {
        "out": str(out), "base": config.base, "python": sys.executable, "data_dir": config.data_dir or "",
        "gpus": str(config.gpus),
    }  # fmt: skip
    problems = machine_problems(config, ROOT, values)
    if problems and not args.dry_run:
        raise SystemExit("\n".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    try:
        with nullcontext() if args.dry_run else run_lock(out / LOCK_NAME, f"quickstart output {out}"):
            loop_steps(args, out, values, problems)
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None
