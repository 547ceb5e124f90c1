"""Running the project's commands from a script, each logged to a replayable shell file.

Run scripts (the quickstart, the reproductions) are sequences of the project's
own entry points (`python -m repo_train fit`, `python -m evaluation run`, ...)
and, at full scale, of launcher scripts (`scripts/launch_train.sh`).
`CommandRunner` runs each as a subprocess (`python -m` ones with the current
interpreter), appends it to `OUT/commands.sh` so every step can be rerun alone
or at full scale, and keeps the wall time of each step. Environment variables
given to the runner (e.g. `OMP_NUM_THREADS=1`) are set for every command and
written in front of it.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from repo_common.atomic import write_text_atomic
from repo_common.launcher_watch import prctl_function, set_parent_death_signal
from repo_common.output_guard import check_output_directory
from repo_train.checkpoints import newest_last_checkpoint

#: Lines of a command's output shown when it fails with its output sent to a log file.
FAILURE_TAIL_LINES = 40
#: The replayable shell file a runner writes into its output directory.
COMMANDS_FILE = "commands.sh"
#: Brackets a command inside an argument of a dry run's command (`later`): written as `$(command)`.
LATER = "\x00"


def later(command: list[str]) -> str:
    """A value known only after an earlier step (a checkpoint path, a scale file's mean), for a dry run's command:
    commands.sh computes it when it reaches that line (`$(command)`), so the dry run's file runs as written."""
    return f"{LATER}{shlex.join(command)}{LATER}"


def shell_argument(argument: str) -> str:
    """One argument as commands.sh writes it: quoted; a `later` value as a `$(...)` inside double quotes."""
    if LATER not in argument:
        return shlex.quote(argument)
    parts = argument.split(LATER)
    literal = [re.sub(r'([\\"$`])', r"\\\1", part) for part in parts[::2]]  # inside "...": only these are special
    return '"' + "".join(f"{text}$({command})" for text, command in zip(literal, parts[1::2])) + literal[-1] + '"'


def _shown_interpreter(cwd: Path | None) -> str:
    """This interpreter's path as commands.sh writes it: relative to `cwd` when inside it (`.venv/bin/python`)."""
    executable = Path(sys.executable).absolute()
    if cwd is not None:
        try:
            return str(executable.relative_to(Path(cwd).absolute()))
        except ValueError:
            pass
    return str(executable)


def project_root() -> Path:
    """Where the run commands (the quickstart, the position-bias reproduction) run their steps and take relative
    paths from: the checkout that holds these packages (a development install, with configs/ and scripts/ there),
    else the current directory (an installed wheel has no checkout)."""
    checkout = Path(__file__).resolve().parents[1]
    return checkout if (checkout / "setup.cfg").is_file() else Path.cwd()


class CommandRunner:
    """Runs commands one after the other, logging each to `script` (default OUT/commands.sh).

    `fresh=True` starts the script anew; `fresh=False` appends to an existing one
    (a resumed run keeps the commands of the runs before it). `env` is added to
    this process's environment for every command. `dry_run=True` writes and
    prints every command without running it (what a researcher checks before a
    long run); such commands take 0 s and are not timed.
    """

    def __init__(
        self,
        out: Path,
        *,
        description: str = "The commands this script ran, in order.",
        cwd: Path | None = None,
        fresh: bool = True,
        script: Path | None = None,
        env: dict[str, str] | None = None,
        dry_run: bool = False,
    ):
        self.out = Path(out)
        self.cwd = cwd
        self.script = Path(script) if script is not None else self.out / COMMANDS_FILE
        self.script.parent.mkdir(parents=True, exist_ok=True)
        #: The script as written so far: each command rewrites it whole, atomically (`_add`), so a reader, a
        #: full disk or a kill never leaves a torn script.
        self._text = ""
        if fresh or not self.script.is_file():
            where = f"cd {shlex.quote(str(Path(cwd).resolve()))}\n" if cwd is not None else ""
            self._add(f"#!/usr/bin/env bash\n# {description}\nset -euo pipefail\n{where}")
        else:
            self._text = self.script.read_text(encoding="utf-8")
        #: The interpreter as the script writes it: the project's virtualenv (relative to cwd when inside it).
        self.python = _shown_interpreter(cwd)
        self.env = dict(env or {})
        self.dry_run = dry_run
        self.timings: list[tuple[str, float]] = []
        # Steps that share a node run from several threads (`StepRunner.together`): one writer at a time.
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()

    def __call__(
        self, title: str, *args: str, log: Path | None = None, echo: bool = True, env: dict[str, str] | None = None
    ) -> float:
        """Run `python -m ARGS` with this interpreter (written as its path, e.g. `.venv/bin/python -m ARGS`)."""
        return self._run(title, [sys.executable, "-m", *args], [self.python, "-m", *args], log=log, echo=echo, env=env)

    def run_argv(
        self,
        title: str,
        argv: list[str],
        *,
        log: Path | None = None,
        echo: bool = True,
        env: dict[str, str] | None = None,
    ) -> float:
        """Run any command (a launcher script, torchrun, ...): logged, echoed and timed like `__call__`.

        Raise `CalledProcessError` on failure; return the wall time in seconds.
        With `log`, the command's stdout and stderr go to that file (the last lines
        are printed if it fails) instead of this process's output. `env` adds to
        the runner's environment for this command only (e.g. its GPUs).
        """
        return self._run(title, [str(a) for a in argv], [str(a) for a in argv], log=log, echo=echo, env=env)

    def interrupt_running(self, grace_seconds: float = 10.0) -> None:
        """SIGINT every command still running (from other threads), then SIGKILL what has not exited after
        `grace_seconds`: a script interrupted while several steps share the node leaves none behind."""
        with self._lock:
            running = list(self._running)
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + grace_seconds
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()

    def note(
        self, title: str, shown: list[str], comment: str, seconds: float, env: dict[str, str] | None = None
    ) -> None:
        """Write a command that is not run now (done in an earlier run, or a dry run's), with `comment`; its
        `seconds` (the earlier run's) count in `timings`."""
        with self._lock:
            self._add(f"\n# {title} ({comment})\n{self._printable(shown, env)}\n")
        if seconds:
            self.timings.append((title, seconds))

    def _add(self, text: str) -> None:
        """`text` added to the script, which is rewritten whole and atomically (never appended in place)."""
        write_text_atomic(self.script, self._text + text)
        self._text += text
        self.script.chmod(0o755)  # `OUT/commands.sh` reruns the whole run

    def _printable(self, shown: list[str], env: dict[str, str] | None = None) -> str:
        prefix = [f"{key}={shlex.quote(value)}" for key, value in {**self.env, **(env or {})}.items()]
        return " ".join([*prefix, *(shell_argument(str(a)) for a in shown)])

    def _run(
        self, title: str, command: list[str], shown: list[str], *, log: Path | None, echo: bool,
        env: dict[str, str] | None = None,
    ) -> float:  # fmt: skip
        printable = self._printable(shown, env)
        added = {**self.env, **(env or {})}
        environment = {**os.environ, **added} if added else None
        with self._lock:
            self._add(f"\n# {title}\n{printable}\n")
            if echo:
                print(f"\n=== {title}\n$ {printable}", flush=True)
        if self.dry_run:
            return 0.0
        if any(LATER in str(a) for a in command):
            raise ValueError(f"{title}: a value known only after a step (`later`) belongs to a dry run's commands")
        start = time.perf_counter()
        if log is None:
            self._wait(command, environment, None)
        else:
            log = Path(log)
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w") as handle:
                returncode = self._wait(command, environment, handle)
            if returncode != 0:
                tail = log.read_text(errors="replace").splitlines()[-FAILURE_TAIL_LINES:]
                with self._lock:
                    print(f"--- {title} failed (exit {returncode}); last lines of {log}:", *tail, sep="\n")
                raise subprocess.CalledProcessError(returncode, command)
        seconds = time.perf_counter() - start
        self.timings.append((title, seconds))
        return seconds

    def _wait(self, command: list[str], environment: dict | None, output) -> int:
        """Run `command` to its end (kept in `_running` meanwhile); without `output`, a failure raises."""
        redirect = {} if output is None else {"stdout": output, "stderr": subprocess.STDOUT}
        with subprocess.Popen(
            command,
            cwd=self.cwd,
            env=environment,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (a ctypes call only)
            **redirect,
        ) as process:
            with self._lock:
                self._running.add(process)
            try:
                returncode = process.wait()
            except BaseException:  # Ctrl-C in this thread: the command gets a moment to stop, as subprocess.run
                _stop(process)
                raise
            finally:
                with self._lock:
                    self._running.discard(process)
        if output is None and returncode != 0:
            raise subprocess.CalledProcessError(returncode, command)
        return returncode


def _stop(process: subprocess.Popen, grace_seconds: float = 0.25) -> None:
    """A command whose waiter was interrupted: a short grace for it to handle the SIGINT it shares, then kill."""
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_PRCTL = prctl_function()


def _die_with_parent() -> None:
    """In a command's process, before it starts: SIGKILL it when the thread that started it dies (a script killed
    with SIGKILL leaves no step running on; kept across exec, so a launcher's torchrun goes too). It only calls
    the prctl resolved at import: nothing here takes a lock that another thread of the parent could hold."""
    set_parent_death_signal(signal.SIGKILL, _PRCTL)


def cpu_trainer_section(max_steps: int, root_dir: Path, **extra) -> dict:
    """The `trainer:` section of a one-process CPU `python -m repo_train fit` config written by a script.

    fp32, gradient clipping at 1.0 (the paper's), and the data module's own
    resumable sampler (so Lightning must not add a distributed one); `extra`
    adds or overrides keys (logging interval, progress bar, logger).
    """
    section = {
        "accelerator": "cpu",
        "devices": 1,
        "precision": "32-true",
        "max_steps": max_steps,
        "gradient_clip_val": 1.0,
        "use_distributed_sampler": False,
        "default_root_dir": str(root_dir),
    }
    section.update(extra)
    return section


def last_checkpoint(run_dir: Path) -> Path:
    """`newest_last_checkpoint`, which a finished run must have: a file for DDP, a directory for DeepSpeed
    ZeRO or FSDP2 (a distributed checkpoint); `python -m repo_train export` takes all three."""
    found = newest_last_checkpoint(run_dir)
    if found is None:
        raise SystemExit(
            f"no last.ckpt under {run_dir}: the train config must keep checkpoint.save_last: true and leave "
            "checkpoint.dirpath unset (checkpoints then go under the run's --trainer.default_root_dir)"
        )
    return found


def logged_csv_metrics(run_dir: Path, prefix: str) -> dict[int, dict[str, float]]:
    """Step -> the values of the metrics named `prefix...` in every CSVLogger `metrics.csv` under `run_dir`
    (a later file's value wins for a step)."""
    steps: dict[int, dict[str, float]] = {}
    for metrics in sorted(Path(run_dir).rglob("metrics.csv")):
        with metrics.open() as handle:
            for row in csv.DictReader(handle):
                values = {key: float(value) for key, value in row.items() if key.startswith(prefix) and value}
                if values:
                    steps.setdefault(int(row["step"]), {}).update(values)
    return steps


def logged_train_losses(run_dir: Path) -> dict[int, float]:
    """Step -> train/loss from the CSV and TensorBoard logs under a training run's root (the default logger is
    TensorBoard's; a later log's value wins for a step)."""
    losses = {step: values["train/loss"] for step, values in logged_csv_metrics(run_dir, "train/").items()
              if "train/loss" in values}  # fmt: skip
    event_dirs = sorted({events.parent for events in Path(run_dir).rglob("events.out.tfevents.*")})
    if event_dirs:
        from tensorboard.backend.event_processing.event_accumulator import (  # heavy: only for runs with event files
            EventAccumulator,
        )

        for directory in event_dirs:
            accumulator = EventAccumulator(str(directory))
            accumulator.Reload()
            if "train/loss" in accumulator.Tags()["scalars"]:
                losses.update({event.step: float(event.value) for event in accumulator.Scalars("train/loss")})
    return losses


def begun_by(script: Path, descriptions: Iterable[str]) -> bool:
    """Whether `script` (an OUT/commands.sh) was begun by a `CommandRunner` with one of `descriptions`: its second
    line names the command that wrote it, so a run directory is recognised by that, not by the file's presence."""
    try:
        with open(script, encoding="utf-8") as handle:
            first, second = handle.readline(4096), handle.readline(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return first.startswith("#!") and second.rstrip("\n") in {f"# {description}" for description in descriptions}


def check_run_directory(out: str | Path | None, what: str, descriptions: Iterable[str]) -> Path:
    """`--out` of a script whose steps resume from their outputs: new, empty, or a directory whose commands.sh
    one of `descriptions` began (`begun_by`); a user's folder is refused in one line (`OutputRefused`). Reads only."""
    names = tuple(descriptions)
    return check_output_directory(
        out, COMMANDS_FILE, what, is_ours=lambda folder: begun_by(folder / COMMANDS_FILE, names)
    )
