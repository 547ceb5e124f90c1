"""A scale file is applied only to the model it was searched for (unless asked otherwise).

LPES scales are searched per model: applied to another model they are just
some numbers. A scale file written by `python -m search run` records the
model it was made for (`model.identity_sha256`: `evaluation.model_identity.model_identity`'s
config hash, which leaves out the dtype, the path and the transformers
version; `model.weight_files`: `evaluation.model_loading.weights_identity` of its
directory, or the tiny default's seed). `check_scale_file_models` compares
them with the model a run evaluates and refuses a mismatch in one line naming
the file and what differs, unless `--allow_other_model_scales` is given (a
deliberate cross-model use, which the run then states on stderr).

Files written before these keys existed (and hand-made files) carry no such
record: they are applied unchecked, and the run says so on stderr.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.methods.lpes.scale_file_format import read_scale_json

#: The flag that lets a run apply a scale file searched on another model.
ALLOW_FLAG = "--allow_other_model_scales"


def scale_file_paths(stacks: Sequence[Any]) -> list[str]:
    """The scale files the methods of `stacks` read (any method with a `scale_file` path), each once."""
    paths: list[str] = []
    for stack in stacks:
        for method in stack.methods:
            path = getattr(method, "scale_file", None)
            if isinstance(path, str) and path not in paths:
                paths.append(path)
    return paths


def model_mismatch(recorded: Any, identity: Mapping[str, Any], weights: Mapping[str, Any] | None) -> list[str]:
    """What differs between a scale file's `model` record and the evaluated model (empty: the same, or unknown)."""
    if not isinstance(recorded, Mapping):
        return []
    differs = []
    config = recorded.get("identity_sha256")
    if config is not None and config != identity.get("config_sha256"):
        differs.append(f"config (sha256 {str(config)[:16]} in the file, {identity.get('config_sha256')} here)")
    files = recorded.get("weight_files")
    if files is not None and weights is not None and dict(files) != dict(weights):
        differs.append(f"weights ({_describe(files)} in the file, {_describe(weights)} here)")
    return differs


def _records_identity(recorded: Any) -> bool:
    """Whether a scale file's `model` record holds what `model_mismatch` compares (a config or weight hash)."""
    return isinstance(recorded, Mapping) and (
        recorded.get("identity_sha256") is not None or recorded.get("weight_files") is not None
    )


def _describe(weights: Mapping[str, Any]) -> str:
    if "tiny_default_seed" in weights:
        return f"the tiny default of seed {weights['tiny_default_seed']}"
    return ", ".join(f"{name} {entry.get('sha256', '?')[:12]}" for name, entry in weights.items()) or "no files"


def check_scale_file_models(
    stacks: Sequence[Any], identity: Mapping[str, Any], weights: Mapping[str, Any] | None, allow: bool = False
) -> list[str]:
    """Refuse (ValueError) a scale file searched for another model; with `allow`, the notes to print instead (and
    a note for each file that records no model, so an unchecked file is never applied silently)."""
    notes = []
    for path in scale_file_paths(stacks):
        data = read_scale_json(path, "lpes")
        recorded = data.get("model") if isinstance(data, dict) else None
        if not _records_identity(recorded):
            notes.append(
                f"lpes: {path} records no model identity (a hand-made file, or one written before 2026-11-26), so "
                "it is applied without checking that it was searched for this model"
            )
            continue
        differs = model_mismatch(recorded, identity, weights)
        if not differs:
            continue
        name = data["model"].get("name", "?")
        line = f"lpes: {path} was searched for another model ({name}; differs in {'; '.join(differs)})"
        if not allow:
            raise ValueError(f"{line}: search this model, or pass {ALLOW_FLAG} to apply it deliberately")
        notes.append(f"{line}; applied anyway ({ALLOW_FLAG})")
    return notes
