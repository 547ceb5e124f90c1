"""Paths of the small Lost-in-the-Middle sample shipped inside the package (`evaluation/data/lost_in_the_middle`).

The CLIs fall back to it when no `--data-dir` is given, so an installed copy runs from any directory without
a checkout; tests use the same files. Paths are built from `__file__` rather than `importlib.resources.files`
because every caller needs a real directory and real files (`--data-dir` globs the folder; gzip and the task
readers open paths): a wheel installs them as plain files, and a zipped import, the one case where only
`importlib.resources.as_file` would yield a path, cannot hold this package's compiled dependencies anyway.
"""

from __future__ import annotations

from pathlib import Path

#: One folder for both tasks, with the release's file-name patterns, so it works as `--data-dir` for mdqa and kv.
LOST_IN_THE_MIDDLE_DIR = Path(__file__).resolve().parent / "data" / "lost_in_the_middle"
#: The first 40 questions of `nq-open-oracle.first2000.jsonl.gz` (one gold passage each).
NQ_OPEN_ORACLE = LOST_IN_THE_MIDDLE_DIR / "nq-open-oracle.first40.jsonl.gz"
#: The first 12 examples of `kv-retrieval-75_keys.jsonl.gz`, under the release's name so `--num-keys 75` finds it.
KV_RETRIEVAL_75_KEYS = LOST_IN_THE_MIDDLE_DIR / "kv-retrieval-75_keys.jsonl.gz"
