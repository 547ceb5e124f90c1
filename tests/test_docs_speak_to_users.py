"""The docs speak to users: a short README, and no line of the project dates a fact by a numbered work period or
says what else shared the machine a number was measured on (a measurement states its load instead)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the project speaks of itself: the README, the docs, the packages and the scripts (not the tests).
SPEAKING = ["README.md", "CHANGELOG.md", "docs", "repo_common", "repo_train", "evaluation", "search", "workflows",
            "scripts", "examples", "configs"]  # fmt: skip
DEVELOPMENT_LOG = re.compile(
    r"\bsession \d+|\bsessions? \d+[–-]\d+|\bsession \d+'s|\bwork period|[-_]s\d{1,2}[-_.]"
    r"|shared (?:them|the \d? ?cores?|\d cores?) with|(?:busy|shared) with (?:other jobs|test runs?)"
    r"|beside (?:other jobs|it\b.*\bran)|ran beside it|other jobs \(load|the other core ran",
    re.IGNORECASE,
)


def _speaking_files() -> list[Path]:
    files = []
    for name in SPEAKING:
        path = ROOT / name
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [f for f in found if f.is_file() and f.suffix in {".md", ".py", ".sh", ".yaml", ".txt", ""}]
    return files


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_no_line_reads_as_a_development_log():
    found = []
    for path in _speaking_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if DEVELOPMENT_LOG.search(line) or DEVELOPMENT_LOG.search(path.name):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_the_pattern_finds_what_it_is_for():
    for line in ("the loaded runs (session 13's)", "benchmark-calibrators-s13-quiet.md", "2 cores shared with other jobs",
                 "while the README's commands ran beside it", "the other core ran other jobs (load 2)"):  # fmt: skip
        assert DEVELOPMENT_LOG.search(line), line
    for line in ("Other jobs: docs/training.md", "a session ends inside a node's time limit", "load average 1.7"):
        assert not DEVELOPMENT_LOG.search(line), line
