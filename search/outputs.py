"""The files one search writes next to its scale file, and which of them `--out` may write over.

Read by the command's checks before anything is loaded (`search.cli`) and by the search itself
(`search.search_run`), also when it is started from Python; they only read.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from repo_common.output_guard import check_output_file, check_parents, require_path


def output_paths(out: str | Path) -> dict[str, Path]:
    """The files of one search, from the scale-file path NAME.json."""
    out = Path(out)
    if out.suffix != ".json":
        raise ValueError(f"--out must name a .json scale file (e.g. scales/NAME.json), got {str(out)!r}")
    stem = out.with_suffix("")
    return {
        "scale": out,
        "log": stem.with_name(stem.name + ".log.jsonl"),
        "curve": stem.with_name(stem.name + ".curve.png"),
        "fitness": stem.with_name(stem.name + ".fitness.png"),
        "state": stem.with_name(stem.name + ".state.json"),
        "config": stem.with_name(stem.name + ".config.yaml"),
    }


def check_search_outputs(out: str | Path, resume: bool) -> dict[str, Path]:
    """The files of the search writing `out`, refused (`repo_common.output_guard`) unless each is missing or this
    search's own: with `--resume` and NAME.state.json every file is the search's; without a state file only
    NAME.config.yaml of the same `--out` may be there (a search killed before its first generation). Reads only."""
    paths = output_paths(require_path(out))
    # its folder exists or can be made, and can be written: refused now, not after the model load and a generation
    check_parents(paths["scale"], fix="nothing was written; pass an --out inside a directory (e.g. scales/NAME.json)")
    if paths["state"].is_file():
        if not resume:
            raise ValueError(
                f"{paths['state']} exists: pass --resume to continue that search, or delete it to start over"
            )
        return paths
    advice = "pass another --out, or delete it if that earlier search is no longer needed"
    for key in ("scale", "log", "curve", "fitness", "config"):
        ours = key == "config" and _own_config(paths["config"], paths["scale"])
        what = "an output" if key != "scale" else "the scale file"
        check_output_file(paths[key], f"{what} of a search that can continue (no {paths['state'].name})",
                          ours=ours, fix=advice)  # fmt: skip
    return paths


def _own_config(path: Path, scale: Path) -> bool:
    """True if `path` is the NAME.config.yaml a search into `scale` wrote (its `out` names that file)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(data, dict) or not {"ga", "task", "out"} <= set(data):
        return False
    return Path(str(data["out"])).resolve() == scale.resolve()


def lock_path(out: str | Path) -> Path:
    """The lock file of the search writing `out` (NAME.json -> NAME.lock), held by rank 0 while it runs."""
    out = Path(out)
    return out.with_name(out.with_suffix("").name + ".lock")
