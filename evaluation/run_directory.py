"""What `--out` of an evaluation run may be, checked before anything is loaded or written.

Plain Python (no torch): `evaluation run` refuses another program's folder, or records whose settings nobody
can check any more, in a second, before it imports the harness (`evaluation.runner`, which checks again).
"""

from __future__ import annotations

from pathlib import Path

from evaluation.results import RECORDS_FILE, rank_records_files
from repo_common.output_guard import OutputRefused, check_output_directory, require_path

#: A run directory's manifest: what its records depend on (`evaluation.runner` writes and checks it).
MANIFEST_FILE = "run.json"


def check_run_directory(out: str | Path) -> Path:
    """`--out` of a run: missing, empty, or an earlier run's (its run.json); records without run.json (made under
    settings nobody can check any more) and a folder of other files are refused before anything is written."""
    path = require_path(out)
    if path.is_file():
        raise NotADirectoryError(
            f"the output directory {out} is a file; pass --out a directory (a new one, or an earlier run's to resume it)"
        )
    records = [p.name for p in [path / RECORDS_FILE, *rank_records_files(path)] if p.is_file() and p.stat().st_size]
    if records and not (path / MANIFEST_FILE).is_file():
        raise OutputRefused(
            f"{path} holds records ({', '.join(records)}) but no {MANIFEST_FILE}, so which model and settings made "
            "them is unknown and a rerun could mix them with other results: pass another --out to start afresh "
            "(or restore that run's run.json)"
        )
    return check_output_directory(path, MANIFEST_FILE, "an evaluation run directory")
