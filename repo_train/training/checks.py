"""Checks run before training starts, each failing with the problem and the fix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from repo_common.file_permissions import check_folder_readable
from repo_train.checkpoints import (
    LIGHTNING_CKPT_ALIASES,
    dcp_lightning_file,
    is_distributed_checkpoint,
    zero_optimizer_shards,
)
from repo_train.data import DataSource, SyntheticData
from repo_train.modeling import RePoOlmo2Config
from repo_train.modeling.methods import position_of_fields, resolve_position
from repo_train.modeling.position_config import PositionConfig, PositionMethod
from repo_train.modeling.presets import preset
from repo_train.training.settings_checks import INIT_FROM_FIX, MOVED_MODEL_OPTIONS, check_init_from_exists


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


#: Weight files `from_pretrained` reads, in its order of preference.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_init_from(path: str | None) -> None:
    """`model.init_from` is an HF model directory of OLMo-2 (config.json and its weights), checked before any write."""
    if path is None:
        return
    directory = Path(path)
    check_init_from_exists(path)  # a hub id, or a folder that is not there
    check_folder_readable(directory)  # a folder or file this user may not read: one line naming it
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"model.init_from={path!r} is not an HF model directory (no config.json there); {INIT_FROM_FIX}"
        )
    # Another architecture's config.json fails here, before the run writes anything; weights that do not fit
    # the model are refused when `configure_model` loads them (RePoOlmo2ForCausalLM.from_pretrained is strict).
    RePoOlmo2Config.get_config_dict(str(directory))
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    if not present:
        raise FileNotFoundError(
            f"model.init_from={path!r} has a config.json but no weights ({' or '.join(WEIGHT_FILES[::2])}); copy the "
            "whole model directory (save_pretrained output), or omit init_from to train from scratch."
        )
    if present[0].endswith(".index.json"):
        index = directory / present[0]
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{index} is not a valid weight index (no readable weight_map: {err}).") from err
        missing = [name for name in shards if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(
                f"model.init_from={path!r}: {len(missing)} of the {len(shards)} weight shards its {present[0]} lists "
                f"are missing ({', '.join(missing[:3])}); the download is incomplete: copy them too."
            )


#: The fields that make a model's shape: a preset that differs from `init_from` in one of them is another model.
SHAPE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)


def preset_overridden_by_init_from(preset_name: str, init_from: str | None, overrides: dict | None) -> str | None:
    """The refusal line when `init_from` loads a model of another shape than `preset_name`, or None.

    `init_from` decides the model, so such a preset would be ignored without a word (a run set up for `tiny`
    would train another model). The caller refuses it only when the preset was set explicitly (the 1B configs
    set the preset init_from has, for the checks that need no weights). Fields in `overrides` apply to both
    and are not compared; an init_from without a readable config.json is left to `check_init_from`.
    """
    if not init_from:
        return None
    try:
        loaded = json.loads((Path(init_from) / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(loaded, dict):
        return None
    expected = preset(preset_name).to_dict()
    differ = [k for k in SHAPE_FIELDS if k not in (overrides or {}) and k in loaded and loaded[k] != expected[k]]
    if not differ:
        return None
    has = ", ".join(f"{k} {loaded[k]}" for k in differ)
    wants = ", ".join(f"{k} {expected[k]}" for k in differ)
    return (
        f"model.init_from={init_from!r} ({has}) is not the model.preset_name={preset_name!r} that is also set "
        f"({wants}): init_from decides the model, so the preset would be ignored; drop model.preset_name (from the "
        f"config file or the command line) to continue from init_from, or drop model.init_from to train "
        f"{preset_name} from scratch"
    )


def check_resume(ckpt_path: str | None, world_size: int, model_parallel: bool = False) -> None:
    """A ZeRO checkpoint holds one optimizer shard per process: it resumes only on the same count, not under FSDP2.

    A distributed checkpoint directory (FSDP2, `model_parallel`: the run's strategy is ModelParallelStrategy)
    is resharded when loaded: it resumes on any process count, but only under that strategy.
    """
    if ckpt_path is None or ckpt_path in LIGHTNING_CKPT_ALIASES:
        return
    path = Path(ckpt_path)
    if not path.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt_path!r} does not exist.")
    if not path.is_dir():
        return
    export = (
        f"Export it (`python -m repo_train export --checkpoint {ckpt_path} --out DIR`) and start a new run with "
        "`--model.init_from DIR` (optimizer state is not carried over)."
    )
    if is_distributed_checkpoint(path):
        dcp_lightning_file(path)  # an incomplete directory is refused here
        if not model_parallel:
            raise ValueError(
                f"{ckpt_path} is a distributed (FSDP2) checkpoint directory; it resumes only with trainer.strategy "
                f"pytorch_lightning.strategies.ModelParallelStrategy (on any number of processes). {export}"
            )
        return
    if model_parallel:
        raise ValueError(f"{ckpt_path} is a DeepSpeed ZeRO checkpoint; it cannot resume under FSDP2. {export}")
    written_by = len(zero_optimizer_shards(path))  # one per process; an incomplete directory is refused here
    if written_by != world_size:
        raise ValueError(
            f"{ckpt_path} is a DeepSpeed ZeRO checkpoint written by {written_by} processes; it cannot resume on "
            f"{world_size}. {export}"
        )


# ----------------------------------------------------------------- resume: saved vs given hyperparameters

#: Option that lets given values differ from a resumed checkpoint's (a CLI flag and a top-level config key).
ALLOW_HPARAM_CHANGES = "allow_hparam_changes"
#: Saved values that fix what the checkpoint's weights and data position mean: they never change on resume
#: (of `position`, its method and layer plan; its other options may change, see `position_layer_plan`).
FIXED_ON_RESUME = {
    "model": ("preset_name", "position", "config_overrides"),
    "data": ("train", "global_batch_size"),
}


def position_from_old_options(old: dict) -> PositionConfig:
    """The `model.position` that a checkpoint's or config's old module options stood for (default method: repo)."""
    options = dict(old.get("position_options") or {})
    for name in ("repo_curriculum_start", "repo_curriculum_steps"):
        if old.get(name):  # 0 was "off", which is today's default
            options[MOVED_MODEL_OPTIONS[name]] = old[name]
    return position_of_fields(
        old.get("position_method") or "repo", options, old.get("repo_start_layer"), old.get("repo_hidden_size")
    )


def upgrade_saved_model_hparams(model: dict) -> dict:
    """A checkpoint's model hyperparameters in today's names: the old position options as `position`."""
    model = dict(model)
    old = {name: model.pop(name) for name in MOVED_MODEL_OPTIONS if name in model}
    if old and "position" not in model:
        model["position"] = position_from_old_options(old).to_config()
    return model


def moved_option_error(old: dict) -> str | None:
    """One line naming the new spelling of old module options (`model.position_method`, ...), or None.

    `old`: each old key found with its value (None where the value is not known).
    """
    if not old:
        return None
    try:
        position = position_from_old_options({k: v for k, v in old.items() if v is not None})
    except (ValueError, TypeError):
        position = None
    if isinstance(position, PositionMethod):
        new = f"--model.position {position.name} (in a config: model.position: {position.name})"
    elif position is not None:
        given = ", ".join(f"{k}: {v}" for k, v in position.changed_options().items())
        new = f"model.position: {{class_path: {type(position).__name__}, init_args: {{{given}}}}}"
    else:
        new = "model.position: METHOD, or {class_path: ..., init_args: {...}} (docs/training.md)"
    return f"model.{', model.'.join(old)} moved: the position method and its options are one option now; write {new}"


def position_layer_plan(position: PositionConfig) -> dict:
    """What the weights depend on in a position: its model-config fields but the options (method, layer plan)."""
    return {k: v for k, v in position.model_config_fields().items() if k != "position_options"}


def _plain(value):
    """Tuples as lists, recursively: YAML, the command line and Lightning's hparams disagree only there."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _show(value) -> str:
    return repr(_plain(value))


def comparable_data(ckpt_path: str, values: dict) -> dict:
    """The data section with its sources as full `{class_path, init_args}` mappings, so that the same source
    compares equal however it was written: a short or long class path, options left at their defaults, or an
    old checkpoint's `source:` dict. `train: None` is the default source it stands for."""
    values = dict(values)
    for key in ("train", "val"):
        if key not in values:
            continue
        try:
            source = DataSource.from_saved(values[key])
        except ValueError as err:
            raise ValueError(f"--ckpt_path {ckpt_path}: data.{key} cannot be read ({err})") from None
        if source is None and key == "train":
            source = SyntheticData()
        values[key] = None if source is None else source.to_config()
    return values


def compare_resume_hparams(
    ckpt_path: str, saved: dict[str, dict], given: dict[str, dict], allow_changes: bool
) -> tuple[dict[str, dict], str | None]:
    """Decide, before training, which hyperparameters a resumed run uses.

    `saved`: the checkpoint's {"model": ..., "data": ...} hyperparameters;
    `given`: the values the command line and config files set explicitly
    (defaults excluded). Data sources are compared as `comparable_data` writes
    them. A saved value that was not given is resumed as saved.
    A given value that differs is an error naming each key and both values,
    unless `allow_changes` (--allow_hparam_changes true): then the given value
    wins, except for the keys in FIXED_ON_RESUME, which are always an error.

    Returns (the saved values to use, per section; a one-line warning listing
    the accepted changes, or None).
    """
    saved = {
        "model": upgrade_saved_model_hparams(saved.get("model", {})),
        "data": comparable_data(ckpt_path, saved.get("data", {})),
    }
    given = {**given, "data": comparable_data(ckpt_path, given.get("data", {}))}
    take: dict[str, dict] = {"model": {}, "data": {}}
    changed, fixed = [], []
    for section in ("model", "data"):
        for key, value in saved.get(section, {}).items():
            if key not in given.get(section, {}):
                take[section][key] = value
                continue
            given_value = given[section][key]
            if key == "position":  # its method and layer plan are fixed; its other options may change
                saved_position, given_position = resolve_position(value), resolve_position(given_value)
                saved_value, given_value = saved_position.to_config(), given_position.to_config()
                is_fixed = position_layer_plan(saved_position) != position_layer_plan(given_position)
            else:
                saved_value, is_fixed = value, key in FIXED_ON_RESUME[section]
            if _plain(given_value) != _plain(saved_value):
                item = f"{section}.{key} = {_show(saved_value)} in the checkpoint, {_show(given_value)} given"
                (fixed if is_fixed else changed).append(item)
    if fixed:
        raise ValueError(
            f"--ckpt_path {ckpt_path} cannot resume with other values of what its weights and data position depend "
            f"on: {'; '.join(fixed)}. Nothing was started: drop these options to resume as saved, or export the "
            "checkpoint (python -m repo_train export) and start a new run from it with --model.init_from."
        )
    if changed and not allow_changes:
        raise ValueError(
            f"--ckpt_path {ckpt_path} was saved with other values than given: {'; '.join(changed)}. Nothing was "
            "started: drop these options to resume with the checkpoint's values, or add "
            f"--{ALLOW_HPARAM_CHANGES} true to make the given values win."
        )
    warning = None
    if changed:
        warning = (
            f"warning: --{ALLOW_HPARAM_CHANGES}: the given values win over the checkpoint's in this resume of "
            f"{ckpt_path}: " + "; ".join(changed)
        )
    return take, warning
