"""What an export directory is: the manifest `python -m repo_train export` writes beside the weights, and which
`--out` an export may replace. Plain Python: the command refuses a foreign `--out` before torch loads."""

from __future__ import annotations

import json
from pathlib import Path

from repo_common.output_guard import check_output_directory

#: The manifest an export writes beside the weights: what `--out` must hold to be replaced by another export.
EXPORT_MANIFEST = "export.json"


def _is_export(directory: Path) -> bool:
    try:
        manifest = json.loads((directory / EXPORT_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and manifest.get("written_by") == "python -m repo_train export"


def check_out(out: str | Path) -> Path:
    """`--out` may be new, empty, or an earlier export (its export.json; replaced whole); anything else (another
    model's HF directory, a user's folder, a file, a link) is refused untouched (`repo_common.output_guard`)."""
    return check_output_directory(
        out,
        EXPORT_MANIFEST,
        "an earlier export",
        is_ours=_is_export,
        fix="pass a new directory path (or an earlier export's, which is replaced)",
        replaced_whole=True,
    )
