"""Paths of the small Lost-in-the-Middle sample shipped inside the package (`evaluation/data/lost_in_the_middle`).

The CLIs fall back to it when no `--data_dir` is given, so an installed copy runs from any directory without
a checkout; tests use the same files. Paths are built from `__file__` rather than `importlib.resources.files`
because every caller needs a real directory and real files (`--data_dir` globs the folder; gzip and the task
readers open paths): a wheel installs them as plain files, and a zipped import, the one case where only
`importlib.resources.as_file` would yield a path, cannot hold this package's compiled dependencies anyway.
"""

from __future__ import annotations

from pathlib import Path

#: One folder for both tasks, with the release's file-name patterns, so it works as `--data_dir` for mdqa and kv.
LOST_IN_THE_MIDDLE_DIR = Path(__file__).resolve().parent / "data" / "lost_in_the_middle"
#: The first 40 questions of `nq-open-oracle.first2000.jsonl.gz` (one gold passage each).
NQ_OPEN_ORACLE = LOST_IN_THE_MIDDLE_DIR / "nq-open-oracle.first40.jsonl.gz"
#: The first 12 examples of `kv-retrieval-75_keys.jsonl.gz`, under the release's name so `--num_keys 75` finds it.
KV_RETRIEVAL_75_KEYS = LOST_IN_THE_MIDDLE_DIR / "kv-retrieval-75_keys.jsonl.gz"

#: Where the full data comes from: the packaged files above are slices of it.
RELEASE = "the Lost in the Middle release (Liu et al., TACL 2024) from github.com/nelson-liu/lost-in-the-middle"
#: The release's files the tasks read (paths inside the release).
NQ_RELEASE_FILE = "qa_data/nq-open-oracle.jsonl.gz"
KV_RELEASE_FILE = "kv_retrieval_data/kv-retrieval-75_keys.jsonl.gz"


def data_folder_hint(option: str = "--data_dir") -> str:
    """What a user without a data folder does: one clause naming the files, where they come from and the option."""
    return (
        f"download {NQ_RELEASE_FILE} (mdqa) and {KV_RELEASE_FILE} (kv) of {RELEASE} into one folder, and pass it "
        f"as {option}"
    )


def nq_file_hint(option: str) -> str:
    """What a user without the NQ-Open oracle file does: one clause naming it, where it comes from and the option."""
    return f"download {NQ_RELEASE_FILE} of {RELEASE} and pass it as {option}"


def check_data_dir(option: str, path: str | Path) -> Path:
    """`path` as an existing folder, or one line saying what to download into one and pass as `option`."""
    if not Path(path).is_dir():
        raise FileNotFoundError(f"{option} {str(path)!r} is not a directory; {data_folder_hint(option)}")
    return Path(path)


def check_nq_file(option: str, path: str | Path) -> Path:
    """`path` as an existing file, or one line saying which release file to download and pass as `option` (a
    ValueError: the workflows' option checks raise one, the commands' dataclasses)."""
    if not Path(path).is_file():
        what = "is a directory, not a file" if Path(path).is_dir() else "not found"
        raise ValueError(f"{option} {str(path)!r} {what}; {nq_file_hint(option)}")
    return Path(path)
