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
from repo_common.run_lock import RunLockedError, run_lock
from workflows.loop_checks import machine_problems
from workflows.quickstart.loop_file import loop_steps
from workflows.quickstart.options import PROG, ROOT, resolve
from workflows.quickstart.tiny_loop import tiny_loop

#: The output directory's lock: one quickstart writes it at a time.
LOCK_NAME = "quickstart.lock"


def run(options: Namespace, parser: ConfigParser) -> int:
    """The command: the checked options (`options.resolve`), then the loop they choose."""
    args = resolve(options, parser)
    try:
        check_out(args.out, (ROOT / args.out).resolve())
    except ValueError as err:
        raise SystemExit(f"{PROG}: {err}") from None
    out = (ROOT / args.out).resolve() if not Path(args.out).is_absolute() else Path(args.out)
    if args.loop is not None:
        run_config(args, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out / LOCK_NAME, f"quickstart output {out}"):
            tiny_loop(args, out)
    except (ValueError, RunLockedError) as err:
        raise SystemExit(f"{PROG}: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None
    return 0


def check_out(given: str, out: Path) -> None:
    """`--out` is new, empty, or an earlier quickstart's (its steps.json, or the commands.sh a run writes before
    its first step); another folder, a file or `--out ''` is refused before anything is written."""
    require_path(given)
    if not (out / "commands.sh").is_file():
        check_output_directory(out, "steps.json", "a quickstart output directory")


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
    except (ValueError, RunLockedError) as err:
        raise SystemExit(f"{PROG}: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit(f"\ninterrupted; rerun the same command to go on from here ({out / 'steps.json'})") from None
