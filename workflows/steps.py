"""Resumable run scripts: each step's completion is recorded in OUT/steps.json, so a rerun skips, resumes or reruns.

A run script (the quickstart and its loop files) is a chain of long steps:
trainings of hours, a search, evaluations. Interrupted (Ctrl-C, a lost node,
SIGKILL), it must not start over. `StepLedger` records, per step, a
fingerprint of what the step depends on (its command line and the files and
directories it reads: `fingerprint`), the outputs it owns, and how it ended.
On the next run `decide` says, per step:

- **skip**: done, with the same inputs, and its outputs are still there;
- **resume**: started (interrupted or failed) with the same inputs: the step's
  own mechanism continues it (the last Lightning checkpoint, the search's
  state file, the evaluation's records);
- **rerun**: done or started with other inputs: its outputs are removed and it
  runs afresh. Its new outputs change the inputs of the steps that read them,
  so those rerun in turn ("everything downstream");
- **run**: never started here.

`StepRunner` applies the decision around a `CommandRunner` and says what it
did and why in one line per step. The ledger is written atomically before and
after each step, so a kill at any moment leaves a readable record.
`StepRunner.together` runs independent steps at the same time, each on its own
slice of the node's GPUs (`gpu_slots`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from repo_common.atomic import write_json_atomic

#: Files up to this size are fingerprinted by content; larger ones (model weights, DeepSpeed shards) by size
#: and modification time, which a rewrite changes (hashing 10 GB of checkpoint on every rerun would cost minutes).
CONTENT_LIMIT = 64 * 1024 * 1024
LEDGER_FORMAT = 1
ACTIONS = ("skip", "resume", "rerun", "run")


def _file_print(path: Path) -> str:
    stat = path.stat()
    if stat.st_size > CONTENT_LIMIT:
        return f"size={stat.st_size},mtime_ns={stat.st_mtime_ns}"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(path: str | Path) -> str | None:
    """What a step reads at `path`: a file's content hash, a directory's over its files (names and contents);
    None when it does not exist. Files above `CONTENT_LIMIT` count by size and mtime."""
    path = Path(path)
    if path.is_file():
        return _file_print(path)
    if not path.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{_file_print(file)}\0".encode())
    return digest.hexdigest()


def inputs_digest(
    argv: Sequence[str], inputs: Sequence[str | Path], upstream: dict[str, str | None] | None = None
) -> tuple[str, dict[str, str | None]]:
    """(one hash of the command line, every input's fingerprint and the run ids of the steps it comes after,
    those fingerprints and run ids by name: `step:KEY` for a step)."""
    prints = {str(path): fingerprint(path) for path in inputs}
    prints.update({f"step:{key}": run_id for key, run_id in (upstream or {}).items()})
    text = json.dumps({"argv": list(map(str, argv)), "inputs": prints}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), prints


@dataclass(frozen=True)
class Decision:
    action: str
    """One of ACTIONS."""
    reason: str
    """Why, in a few words ("done earlier, same inputs", "its inputs changed: X")."""


def decide(record: dict[str, Any] | None, digest: str, outputs_present: bool, changed: Sequence[str] = ()) -> Decision:
    """What to do with a step, from its earlier record (None: none), this run's inputs digest, whether its
    outputs still exist, and which inputs differ from the record's (for the message)."""
    if record is None:
        return Decision("run", "not run before")
    if record.get("inputs_sha256") != digest:
        what = ", ".join(changed) if changed else "its command line"
        return Decision("rerun", f"its inputs changed since the last run ({what})")
    if record.get("status") == "done":
        if outputs_present:
            return Decision("skip", "done earlier with the same inputs")
        return Decision("rerun", "done earlier, but its outputs are gone")
    return Decision("resume", f"{record.get('status', 'started')} earlier with the same inputs")


class StepLedger:
    """OUT/steps.json: per step key, its inputs digest and fingerprints, command, outputs, status and times."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.steps: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # steps that run together update it from several threads
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                steps = data["steps"]
                if not isinstance(steps, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                raise ValueError(
                    f"{self.path} (the record of finished steps) is not a readable steps file; delete it to run "
                    "every step again, or use another --out"
                ) from None
            self.steps = steps

    def record(self, key: str) -> dict[str, Any] | None:
        return self.steps.get(key)

    def update(self, key: str, **fields: Any) -> None:
        with self._lock:
            self.steps[key] = {**self.steps.get(key, {}), **fields}
            write_json_atomic(self.path, {"format_version": LEDGER_FORMAT, "steps": self.steps}, indent=1)

    def plan(
        self,
        key: str,
        argv: Sequence[str],
        inputs: Sequence[str | Path],
        outputs: Sequence[str | Path],
        after: Sequence[str] = (),
    ):
        """(decision, digest, fingerprints) of a step now; `after`: the keys of the steps whose outputs it reads
        (a step that ran again since makes this one rerun, even when its outputs came out the same)."""
        upstream = {name: (self.record(name) or {}).get("run_id") for name in after}
        digest, prints = inputs_digest(argv, inputs, upstream)
        record = self.record(key)
        before = (record or {}).get("inputs", {})
        changed = [
            f"{path[5:]} ran again" if path.startswith("step:") else path
            for path, value in prints.items()
            if before.get(path, value) != value
        ]
        changed += [f"{path} (no longer read)" for path in before if path not in prints]
        present = all(Path(path).exists() for path in outputs)
        return decide(record, digest, present, changed), digest, prints


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def remove_outputs(outputs: Sequence[str | Path]) -> None:
    """Delete a step's outputs before it reruns afresh (they are the run directory's own)."""
    for output in map(Path, outputs):
        if output.is_dir() and not output.is_symlink():
            shutil.rmtree(output)
        elif output.exists() or output.is_symlink():
            output.unlink()


class StepRunner:
    """Runs a script's steps through a `CommandRunner`, skipping, resuming or rerunning each as `decide` says.

    `dry_run`: prints each step's decision and command, changes nothing.
    """

    def __init__(self, runner, ledger: StepLedger, *, dry_run: bool = False):
        self.runner = runner
        self.ledger = ledger
        self.dry_run = dry_run
        self.decisions: list[tuple[str, Decision, str]] = []
        """(title, decision, resources) of every step so far, for a plan."""

    def step(
        self,
        key: str,
        title: str,
        argv: Sequence[str],
        *,
        inputs: Sequence[str | Path] = (),
        outputs: Sequence[str | Path] = (),
        resume: Callable[[], list[str] | None] | None = None,
        module: bool = False,
        related: Sequence[str | Path] = (),
        after: Sequence[str] = (),
        resources: str = "",
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> Decision:
        """Run one step (`python -m ARGV` when `module`, else ARGV as a command) unless it is done.

        `inputs`: files and directories it reads; `outputs`: what it writes (removed before a fresh rerun);
        `related`: outputs' side files removed with them (a search's state, log and plots); `after`: the
        steps whose outputs it reads (it reruns whenever one of them ran again); `resources`: what it runs on,
        for the plan (e.g. "8 processes, 8 GPUs"); `env`: added to the command's environment (its GPUs);
        `log`: a file for its output instead of this process's (steps that run together).
        `resume()` gives the arguments that continue an interrupted run ([] = the same command resumes,
        None = nothing to continue from: start afresh).
        """
        decision, digest, prints = self.ledger.plan(key, argv, inputs, outputs, after)
        shown = [self.runner.python, "-m", *argv] if module else list(argv)
        extra: list[str] = []
        if decision.action == "resume" and not self.dry_run:
            continued = resume() if resume is not None else None
            if continued is None:
                decision = Decision("rerun", f"{decision.reason}, nothing to continue from")
            extra = continued or []
        self.decisions.append((title, decision, resources))
        print(f"\n--- {title}: {decision.action} ({decision.reason})", flush=True)
        if decision.action == "skip":
            seconds = float((self.ledger.record(key) or {}).get("seconds", 0.0))
            self.runner.note(title, shown, f"done in an earlier run ({seconds:.0f} s)", seconds, env=env)
            return decision
        if self.dry_run:  # the runner writes and prints the command without running it
            self._launch(title, argv, module, env, log)
            return decision
        if decision.action == "rerun":
            remove_outputs([*outputs, *related])
        self.ledger.update(
            key, title=title, status="running", inputs_sha256=digest, inputs=prints, argv=[*argv, *extra],
            outputs=[str(o) for o in outputs], started=_now(), finished=None, exit_code=None,
        )  # fmt: skip
        start = time.perf_counter()
        try:
            self._launch(title, [*argv, *extra], module, env, log)
        except subprocess.CalledProcessError as err:
            self.ledger.update(key, status="failed", exit_code=err.returncode, finished=_now())
            raise
        except KeyboardInterrupt:
            self.ledger.update(key, status="interrupted", finished=_now())
            raise
        seconds = time.perf_counter() - start
        self.ledger.update(key, status="done", exit_code=0, finished=_now(), seconds=seconds, run_id=uuid.uuid4().hex)
        return decision

    def _launch(self, title: str, argv: Sequence[str], module: bool, env: dict | None, log: Path | None) -> None:
        if module:
            self.runner(title, *argv, env=env, log=log)
        else:
            self.runner.run_argv(title, list(argv), env=env, log=log)

    def together(self, steps: Sequence[dict[str, Any]], slots: Sequence[dict[str, str]], logs: Path) -> None:
        """Run independent `steps` (each the keyword arguments of `step`) at the same time, as many at once as
        there are `slots`; a step takes a free slot (its environment: e.g. its GPUs, from `gpu_slots`) and
        writes its output to `logs/KEY.log`. A failed step lets the others finish (their work is kept) and is
        raised after them; Ctrl-C stops them all. A dry run lists them in order, slots in turn."""
        if len(slots) <= 1 or self.dry_run:
            for i, spec in enumerate(steps):
                slot = slots[i % len(slots)] if slots else {}
                self.step(**{**spec, "env": {**slot, **spec.get("env", {})}})
            return
        free = list(range(len(slots)))
        free_lock = threading.Lock()

        def run_one(spec: dict[str, Any]) -> Decision:
            with free_lock:
                index = free.pop(0)
            try:
                log = Path(logs) / f"{spec['key']}.log"
                print(f"\n--- {spec['title']}: on slot {index + 1} of {len(slots)}, output in {log}", flush=True)
                return self.step(**{**spec, "env": {**slots[index], **spec.get("env", {})}, "log": log})
            finally:
                with free_lock:
                    free.append(index)

        pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="step")
        futures = [pool.submit(run_one, spec) for spec in steps]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:  # the others finish before the first failure is raised
                future.exception()
            for future in futures:
                future.result()
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            self.runner.interrupt_running()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def gpu_slots(gpus: int, at_once: int, visible: str | None = None, base_port: int = 29500) -> list[dict[str, str]]:
    """`at_once` disjoint slices of the node's `gpus` GPUs, as environments: CUDA_VISIBLE_DEVICES (within an
    existing CUDA_VISIBLE_DEVICES list when `visible` is one), NPROC_PER_NODE (one process per GPU) and a
    MASTER_PORT of its own, so the torchruns of steps that run together never meet."""
    if at_once < 1 or gpus % at_once:
        raise ValueError(f"{gpus} GPUs cannot be split into {at_once} equal slices: choose a divisor of {gpus}")
    devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(gpus)]
    if len(devices) < gpus:
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} lists {len(devices)} GPUs, fewer than gpus: {gpus}")
    size = gpus // at_once
    return [
        {
            "CUDA_VISIBLE_DEVICES": ",".join(devices[i * size : (i + 1) * size]),
            "NPROC_PER_NODE": str(size),
            "MASTER_PORT": str(base_port + i),
        }
        for i in range(at_once)
    ]


def visible_devices() -> str | None:
    """This process's CUDA_VISIBLE_DEVICES (None when unset): `gpu_slots` slices within it."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")
