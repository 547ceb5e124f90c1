"""Checks of the training settings that need neither torch nor Lightning.

`fit` / `validate` (training/cli.py) call `check_settings` as soon as
LightningCLI has parsed, before the model is built or any data is read, and
the same functions again where the built objects give exact values (the
Trainer's world size, its root dir); workflows/loop_config.py judges a loop's
train configs through the same parse.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from repo_common import user_code
from repo_common.config_cli import config_size_problem, read_config_yaml, take_flag
from repo_common.model_directory import download_hint, looks_like_hub_id, no_such_directory
from repo_common.run_lock import LOCK_FILE
from repo_train.checkpoints import (
    LIGHTNING_CKPT_ALIASES,
    checkpoint_damage,
    checkpoint_mtime,
    missing_checkpoint_message,
    newest_last_checkpoint,
)

#: Module options that are `model.position` now (old checkpoints and configs): old name -> its key in the
#: model-config fields a position maps to.
MOVED_MODEL_OPTIONS = {
    "position_method": "position_method",
    "repo_start_layer": "repo_start_layer",
    "repo_hidden_size": "repo_hidden_size",
    "position_options": "position_options",
    "repo_curriculum_start": "curriculum_start",
    "repo_curriculum_steps": "curriculum_steps",
}


#: What to do about an `init_from` that is not there.
INIT_FROM_FIX = (
    "point it to a downloaded OLMo-2 checkpoint (e.g. the stage-1 1B at step 1907359) or omit it to train from scratch."
)


def check_init_from_exists(path: str | None) -> None:
    """`model.init_from` is an existing local path: a hub id gets the download hint, a misspelt folder its
    nearest sibling (what it holds is `checks.check_init_from`'s to judge, with the model classes)."""
    if path is None:
        return
    if looks_like_hub_id(str(path)):
        raise FileNotFoundError(f"model.init_from={path!r} is not a local directory; {download_hint(str(path))}")
    if not Path(path).exists():
        raise FileNotFoundError(
            f"model.init_from={path!r} is not an HF model directory: {no_such_directory(str(path))}; {INIT_FROM_FIX}"
        )


def check_paths_before_lightning(argv: list[str]) -> None:
    """The paths of a `fit` / `validate` command line, judged before torch and Lightning load (seconds): a
    `--ckpt_path` that does not exist, a `model.init_from` that is not there (both also from `--config` files;
    the command line wins, as in the parser). Anything unclear (a flag without its value, a config file that is
    missing or not YAML) is left to the parser, which judges every setting again (`check_settings`)."""
    try:
        ckpt_given, rest = take_flag(argv, "--ckpt_path")
        init_given, rest = take_flag(rest, "--model.init_from")
        configs = [data for data in read_config_files(config_file_arguments(rest)) if isinstance(data, dict)]
    except ValueError:
        return
    ckpt_path = _last(ckpt_given, [data.get("ckpt_path", _UNSET) for data in configs])
    if ckpt_path is not None and str(ckpt_path) not in LIGHTNING_CKPT_ALIASES and not Path(ckpt_path).exists():
        raise FileNotFoundError(missing_checkpoint_message(ckpt_path))
    models = [data.get("model") for data in configs if isinstance(data.get("model"), dict)]
    sections = [model["init_args"] if isinstance(model.get("init_args"), dict) else model for model in models]
    init_from = _last(init_given, [section.get("init_from", _UNSET) for section in sections])
    if init_from is None or isinstance(init_from, str):
        check_init_from_exists(init_from)


_UNSET = object()


def _last(given: list[str], from_files: list[Any]) -> Any:
    """The value that holds: the command line's last (`null` is None), else the last config file's that sets it."""
    if given:
        value = given[-1]
        return None if value.strip() in ("", "null", "None") else value
    set_in_files = [value for value in from_files if value is not _UNSET]
    return set_in_files[-1] if set_in_files else None


def check_root_dir(root: str) -> None:
    """`trainer.default_root_dir` must be a directory (or not exist yet); writability is probed by the run lock."""
    path = Path(root)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"trainer.default_root_dir={root!r} is a file, not a directory: pass a directory for the run's "
            "checkpoints and logs (it is created if missing)."
        )


def unwritable_root_dir(root: str, err: OSError) -> ValueError:
    return ValueError(
        f"trainer.default_root_dir={root!r} cannot be written ({err.strerror or type(err).__name__}): pass a "
        "directory this user can write (it is created if missing)."
    )


def earlier_run_checkpoint(root: str) -> Path | None:
    """The checkpoint an earlier run left in `root`: the newest last.ckpt, else the newest *.ckpt (e.g. a
    step=N.ckpt alone); None if there is none. A local root only."""
    if not Path(root).is_dir():
        return None
    others = list(Path(root).rglob("*.ckpt"))
    return newest_last_checkpoint(root) or (max(others, key=checkpoint_mtime) if others else None)


def check_no_earlier_run(root: str, ckpt_path: str | None) -> None:
    """A `fit` without `--ckpt_path` into a root that holds an earlier run's checkpoint is refused.

    Lightning would start again at step 0 in a new version_N beside the old
    checkpoints, and `newest_last_checkpoint` would later pick either run's. The
    message names the checkpoint (the newest last.ckpt, else the newest *.ckpt)
    and the flag that resumes it. Remote roots are not searched.
    """
    if ckpt_path or "://" in root:
        return
    found = earlier_run_checkpoint(root)
    damage = checkpoint_damage(found) if found is not None else None
    if damage is not None:  # never point the user at resuming a file that cannot be resumed
        raise ValueError(
            f"--trainer.default_root_dir {root} holds an earlier run's checkpoint {found}, which is damaged ({damage}); "
            "move it away (or resume from an earlier checkpoint with --ckpt_path), or pass another "
            "--trainer.default_root_dir to start afresh"
        )
    if found is not None:
        raise ValueError(
            f"--trainer.default_root_dir {root} holds an earlier run's checkpoint {found}: pass --ckpt_path {found} "
            "to resume it, or another --trainer.default_root_dir to start afresh"
        )


def check_every_n_train_steps(every: int | None) -> None:
    """Step checkpoints are what a stopped run resumes from: an interval below 1 would write none."""
    if every is not None and every < 1:
        raise ValueError(
            f"checkpoint.every_n_train_steps must be >= 1, got {every}: without step checkpoints a stopped run "
            "cannot resume; give N (the paper runs use 1000)"
        )


def check_validate_inputs(val, ckpt_path: str | None, init_from: str | None) -> None:
    """`validate` scores the validation data on a checkpoint; without either it would do nothing and exit 0."""
    missing = []
    if val is None:
        missing.append("--data.val SOURCE (the data to validate on)")
    if not ckpt_path and not init_from:
        missing.append("--ckpt_path CKPT or --model.init_from DIR (the weights to validate)")
    if missing:
        raise ValueError(
            f"validate needs {' and '.join(missing)}: without them it would validate nothing (or freshly "
            "initialised weights) and report success"
        )


def batch_accumulation(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Micro-batches per optimizer step per process; refuses a split that is not exact."""
    if global_batch < 1 or micro_batch < 1:
        raise ValueError(f"batch sizes must be >= 1 (global={global_batch}, micro={micro_batch})")
    per_step = micro_batch * world_size
    if global_batch % per_step:
        raise ValueError(
            f"global_batch_size={global_batch} is not divisible by micro_batch_size × processes = "
            f"{micro_batch} × {world_size} = {per_step}; pick a micro batch (or process count) that divides it."
        )
    return global_batch // per_step


def config_file_arguments(args: list[str]) -> list[str]:
    """The files `args` name with `--config FILE` / `-c FILE` (either spelling, in order)."""
    files, rest = take_flag(args, "--config")
    short, _ = take_flag(rest, "-c")
    return [*files, *short]


def read_config_files(paths: list[str]) -> list[Any]:
    """Each existing `--config` file's YAML (None for one that is missing or not valid YAML: the parser reports
    those in its own words); a file too big, binary, or expanding past the cap (an alias bomb) is refused first,
    naming the file, before the parser would expand it."""
    found = []
    for path in paths:
        try:  # too big or binary: refused here (the parser's own words would not name the file)
            data = read_config_yaml(path) if Path(path).is_file() else None
        except yaml.YAMLError:
            data = None
        problem = config_size_problem(path, data) or section_shape_problem(path, data)
        if problem:
            raise ValueError(problem)
        found.append(data)
    return found


#: The sections of a `fit` / `validate` config file: each a mapping of its keys (or null, or a nested file's path).
SECTIONS = ("model", "data", "trainer")


def section_shape_problem(path: str, data: Any) -> str | None:
    """A config file whose `model:`, `data:` or `trainer:` is a number, a boolean or a list (jsonargparse ends
    in a TypeError, or judges another key): one line naming the file and the section."""
    if not isinstance(data, dict):
        return None
    for section in SECTIONS:
        value = data.get(section)
        if value is not None and not isinstance(value, dict | str):
            return (
                f"--config {path}: '{section}:' is {value!r}, a {type(value).__name__}; it must be a section of keys "
                f"(indented `key: value` lines under `{section}:`) or be left out"
            )
    return None


def named_class_paths(args: list[str], configs: list[Any]) -> list[str]:
    """The class_paths the config files (their `model` and `data` sections) and the command line give under
    `--model` and `--data` (`--data.train a.b.C`, a YAML value with class_path keys, `--data.train.class_path
    a.b.C`): each is checked (`user_code.check_class_path`) before anything imports it. Trainer callbacks and
    loggers name Lightning's and other libraries' classes and are left to the parser."""
    found: list[str] = []
    for data in configs:
        if isinstance(data, dict):
            found += [*user_code.class_paths_in(data.get("data")), *user_code.class_paths_in(data.get("model"))]
    for index, arg in enumerate(args):
        option, eq, value = arg.partition("=")
        if not option.startswith(("--data.", "--model.")):
            continue
        value = value if eq else (args[index + 1] if index + 1 < len(args) else "")
        if value[:1] in ("{", "["):
            found += user_code.class_paths_in_args([value])
        elif option.endswith(("class_path", ".train", ".val")) and "." in value:
            found.append(value)
    return found


def check_settings(subcommand: str, value: Callable[[str], Any], root_dir: bool = True) -> None:
    """The parsed `fit` / `validate` settings that need no model: a `--ckpt_path` that does not exist, `validate`
    with nothing to validate; for `fit` a root dir that is a file or holds an earlier run (not judged when
    `root_dir` is False: a caller that sets the root itself), `checkpoint.every_n_train_steps` below 1, a
    global batch the micro batch does not divide (one process). `value(key)` is the parsed value of a dotted key."""
    for section in ("trainer", "model", "data"):  # `trainer: null` in a YAML file would reach Lightning as None
        if value(section) is None:
            raise ValueError(
                f"{section}: null in the config leaves out the whole {section} section; give its keys, or delete the "
                "line for the defaults"
            )
    ckpt_path, root = value("ckpt_path"), value("trainer.default_root_dir")
    if ckpt_path and str(ckpt_path) not in LIGHTNING_CKPT_ALIASES and not Path(ckpt_path).exists():
        raise FileNotFoundError(missing_checkpoint_message(ckpt_path))
    if subcommand == "validate":
        check_validate_inputs(value("data.val"), ckpt_path, value("model.init_from"))
        return
    if subcommand != "fit":
        return
    if root_dir and root is not None and "://" not in str(root):  # the working directory (None), remote: as the run
        check_root_dir(str(root))
        if not (Path(root) / LOCK_FILE).exists():  # maybe a run in progress: the run lock names its holder
            check_no_earlier_run(str(root), ckpt_path)
    check_every_n_train_steps(value("checkpoint.every_n_train_steps"))
    one_process = value("trainer.devices") in (1, "1") and value("trainer.num_nodes") in (1, None)
    if one_process and "WORLD_SIZE" not in os.environ:
        batch_accumulation(value("data.global_batch_size"), value("data.micro_batch_size"), 1)
