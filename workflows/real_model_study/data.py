"""What the real-model study's prompts and numbers depend on: the data split into search and evaluation
questions, written once."""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path

from repo_common.atomic import write_text_atomic

DATA_NAME = "nq-open-oracle.jsonl.gz"  # the name the mdqa task finds in a --data_dir


def questions_needed(size: Mapping[str, int]) -> int:
    """Questions the data file must hold for `size`: the search file's (its search and held-out questions, and at
    least 4k, the pool of its questions' k - 1 distractors), then the evaluation file's (its questions and k - 1
    distractors), disjoint (`split_data`)."""
    return _search_count(size) + size["questions"] + size["documents"] - 1


def _search_count(size: Mapping[str, int]) -> int:
    return max(size["search_questions"] + size["held_out"], 4 * size["documents"])


def count_questions(source: Path) -> int:
    """The non-blank lines of a .jsonl(.gz) file: its questions (one a line). A file that cannot be read as one
    is a ValueError of one line naming it."""
    opener = gzip.open if source.suffix == ".gz" else open
    try:
        with opener(source, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except (OSError, EOFError) as err:
        raise ValueError(f"{source} is not a readable .jsonl(.gz) file ({err}); pass an nq-open-oracle file") from None


def split_data(source: Path, out: Path, size: Mapping[str, int]) -> dict[str, Path]:
    """Two files of disjoint questions: search (fitness + held-out) first, then evaluation; written once."""
    folders = {"search": out / "data" / "search", "eval": out / "data" / "eval"}
    if all((folder / DATA_NAME).is_file() for folder in folders.values()):
        return folders
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as handle:
        lines = [line for line in handle if line.strip()]
    if len(lines) < questions_needed(size):
        raise ValueError(
            f"{source} has {len(lines)} questions; the study needs {questions_needed(size)} "
            "(search, held-out, evaluation and distractors): lower the sizes or pass a larger file"
        )
    # a question's k-1 distractors come from its own file: each file keeps at least 4k questions as the pool
    pool = max(4 * size["documents"], size["questions"] + size["documents"])
    search_lines = lines[: _search_count(size)]
    eval_lines = lines[len(search_lines) : len(search_lines) + pool]
    for name, chunk in (("search", search_lines), ("eval", eval_lines)):
        target = folders[name] / DATA_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target.with_suffix(".tmp-plain"), "".join(chunk))
        with open(target.with_suffix(".tmp-plain"), "rb") as plain, gzip.open(str(target) + ".part", "wb") as packed:
            packed.write(plain.read())
        target.with_suffix(".tmp-plain").unlink()
        Path(str(target) + ".part").replace(target)
    return folders
