"""Checks run before training starts, each failing with the problem and the fix."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from repo_train.modeling import RePoOlmo2Config


def check_config_overrides(overrides: dict | None) -> None:
    """`model.config_overrides` may only name real `RePoOlmo2Config` fields."""
    if not overrides:
        return
    known = {f.name for f in dataclasses.fields(RePoOlmo2Config)} | {"rope_scaling"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"model.config_overrides has unknown key(s) {unknown}; valid keys are RePoOlmo2Config fields such as "
            "rope_parameters, max_position_embeddings, vocab_size, hidden_size, num_hidden_layers."
        )


def check_init_from(path: str | None) -> None:
    if path is None:
        return
    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"model.init_from={path!r} is not an HF model directory (no config.json there); point it to a "
            "downloaded OLMo-2 checkpoint (e.g. the stage-1 1B at step 1907359) or omit it to train from scratch."
        )
    # Another architecture's config.json fails here, before the run writes anything; weights that do not fit
    # the model are refused when `configure_model` loads them (RePoOlmo2ForCausalLM.from_pretrained is strict).
    RePoOlmo2Config.get_config_dict(str(directory))


def zero_checkpoint_world_size(checkpoint: Path) -> int | None:
    """Processes that wrote a DeepSpeed ZeRO checkpoint directory (None if it is not one)."""
    if not checkpoint.is_dir():
        return None
    shards = list(checkpoint.rglob("*zero_pp_rank_*_mp_rank_*optim_states.pt"))
    return len(shards) or None


def check_resume(ckpt_path: str | None, world_size: int) -> None:
    """A ZeRO checkpoint holds one optimizer shard per process: it resumes only on the same count."""
    if ckpt_path is None or ckpt_path in ("last", "best", "hpc", "registry"):
        return
    path = Path(ckpt_path)
    if not path.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt_path!r} does not exist.")
    written_by = zero_checkpoint_world_size(path)
    if written_by is not None and written_by != world_size:
        raise ValueError(
            f"{ckpt_path} is a DeepSpeed ZeRO checkpoint written by {written_by} processes; it cannot resume on "
            f"{world_size}. Export it (`python -m repo_train export --checkpoint {ckpt_path} --out DIR`) and start "
            "a new run with `--model.init_from DIR` (optimizer state is not carried over)."
        )
