"""`fit --help` and `fit --print_config` in a fraction of a second: LightningCLI's own output, kept on file.

LightningCLI builds its parser from the LightningModule, the data module and
Lightning's Trainer, so it imports torch and Lightning before it can answer
(~20 s on two loaded cores). `help_snapshot.json` holds what the live command
printed, for a stdout that is a terminal and for one that is not (a default
differs), under a key: a hash of every source file under repo_train/ and
repo_common/, the versions of the packages that shape the parser, Python's
version and the help width. It is served only when the key of this checkout
matches exactly; otherwise the live LightningCLI answers (slow, never wrong).
The help is formatted `HELP_COLUMNS` wide either way, so both are the same text.

Regenerate after changing the training code or upgrading those packages:

    python scripts/regenerate_help_snapshot.py

tests/test_help_snapshot.py (slow) runs the live command and fails when it
differs from the file, or when the file's key is not this checkout's.
Stdlib only: read before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import sys
import tty
from importlib import metadata
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("help_snapshot.json")
#: Set (to anything), the live LightningCLI answers everything: no help, print_config or refusal from the file.
LIVE = "REPO_TRAIN_LIVE"
#: The argument lists answered from the snapshot (exactly these: anything more is parsed live).
QUESTIONS = {
    ("fit", "--help"): "fit --help",
    ("fit", "-h"): "fit --help",
    ("fit", "--print_config"): "fit --print_config",
}
#: The width `fit --help` is formatted at, live or from the snapshot (argparse reads COLUMNS).
HELP_COLUMNS = 100
#: The entry holding the `fit` / `validate` parsers' options (`repo_train.fit_precheck`), beside the two modes'.
PARSER = "parser"
#: Packages whose code shapes LightningCLI's parser and help text.
PACKAGES = ("pytorch-lightning", "lightning-utilities", "jsonargparse", "docstring-parser", "torch", "transformers")
_ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("repo_train", "repo_common")


def question(argv: list[str]) -> str | None:
    """The snapshot's name for `argv` ("fit --help", "fit --print_config"), or None when it is not one."""
    return QUESTIONS.get(tuple(argv))


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def inputs_key(terminal: bool) -> str:
    """Hash of everything the live answer depends on: sources, package versions, Python, width, and whether
    stdout and stderr are a terminal (the progress bar's default)."""
    digest = hashlib.sha256()
    parts = [f"python {sys.version_info[0]}.{sys.version_info[1]}", f"columns {HELP_COLUMNS}", f"terminal {terminal}"]
    parts += [f"{package} {_version(package)}" for package in PACKAGES]
    digest.update("\n".join(parts).encode())
    for folder in _SOURCES:
        for path in sorted((_ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _mode(terminal: bool) -> str:
    return "terminal" if terminal else "pipe"


def current_entry(name: str, terminal: bool) -> dict | None:
    """The snapshot's entry `name` when it was made from this checkout's sources and these packages (its key is
    `inputs_key(terminal)`); None when it was not, when there is no readable snapshot, or when LIVE is set."""
    if os.environ.get(LIVE) or not SNAPSHOT.is_file():
        return None
    try:
        entry = json.loads(SNAPSHOT.read_text(encoding="utf-8"))[name]
        return entry if entry["key"] == inputs_key(terminal) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def answer(argv: list[str], terminal: bool) -> bool:
    """Print the snapshot's answer to `argv` and say True, or say False (not a snapshot question, no snapshot,
    or one made from other sources or packages: the caller runs LightningCLI)."""
    name = question(argv)
    entry = None if name is None else current_entry(_mode(terminal), terminal)
    try:
        text = entry["outputs"][name]
    except (KeyError, TypeError):
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


def live_answer(argv: list[str], terminal: bool) -> str:
    """What `python -m repo_train ARGV` prints, live (LightningCLI, snapshot bypassed), with stdout and stderr a
    pipe or a terminal (a pseudo-terminal in raw mode: no newline translation)."""
    env = {**os.environ, "COLUMNS": str(HELP_COLUMNS), LIVE: "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "repo_train", *argv]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=_ROOT, check=False, timeout=600)
        if done.returncode != 0 or done.stderr.strip():
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        return done.stdout
    leader, follower = pty.openpty()
    tty.setraw(follower)
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=_ROOT
    ) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        if proc.wait(timeout=600) != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {b''.join(chunks).decode()[-2000:]}")
    return b"".join(chunks).decode()


def live_parser_options() -> dict:
    """The `fit` / `validate` parsers' options (`repo_train.fit_precheck`), from a fresh interpreter that builds
    LightningCLI's parsers."""
    code = (
        "import json; from repo_train.training.cli import kept_parser_options; print(json.dumps(kept_parser_options()))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=_ROOT, check=False, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"the parsers' options: exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def live_snapshot() -> dict:
    """The snapshot of this checkout, from the live command: {mode: {"key": ..., "versions": {package: version},
    "outputs": {question: text}}} (the versions are part of the key, kept apart to say why a key differs), and
    {PARSER: {"key", "versions", "subcommands": {name: options}}} for `repo_train.fit_precheck`."""
    names = sorted(set(QUESTIONS.values()))
    snapshot = {
        _mode(terminal): {
            "key": inputs_key(terminal),
            "versions": package_versions(),
            "outputs": {name: live_answer(name.split(), terminal) for name in names},
        }
        for terminal in (False, True)
    }
    snapshot[PARSER] = {"key": inputs_key(False), "versions": package_versions(), "subcommands": live_parser_options()}
    return snapshot


def package_versions() -> dict[str, str]:
    """The installed versions of the packages the key names (and Python's)."""
    return {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", **{p: _version(p) for p in PACKAGES}}
