"""How an interrupted quickstart step goes on: training from its newest last.ckpt, a search from its state file.

The step ledger (`workflows.steps`) calls these when a step was interrupted; None means start it afresh.
"""

from __future__ import annotations

from pathlib import Path

from repo_train.checkpoints import newest_last_checkpoint
from search.outputs import output_paths


def training_resume(run_dir: Path) -> list[str] | None:
    """Resume an interrupted training from its newest last.ckpt; None (start afresh) when it saved none."""
    found = newest_last_checkpoint(run_dir)
    return ["--ckpt_path", str(found)] if found is not None else None


def search_files(scale_file: Path) -> list[Path]:
    """A search's side files (state, log, plots, config, timing), removed with its scale file on a fresh rerun."""
    paths = output_paths(scale_file)
    state = paths["state"]
    return [*(path for key, path in paths.items() if key != "scale"), state.with_name(state.name + ".timing.json")]


def search_resume(scale_file: Path) -> list[str] | None:
    """Resume an interrupted search from its state file (`--resume`); None when it wrote none yet."""
    return ["--resume"] if output_paths(scale_file)["state"].is_file() else None
