"""A full-scale loop file's checks that need the project's own parsers: each train config as `fit` parses it,
every evaluation as `python -m evaluation run` resolves it, and what exists only on the GPU machine.

They load Lightning and the harness (seconds), so the quickstart imports this module only once a loop file is
given (`workflows/loop_config.py` reads the file; its sections check themselves when built).
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import yaml

from evaluation.cli import COMMANDS
from evaluation.config import resolve
from evaluation.methods.base import METHODS, parse_method_spec, spec_fields, split_stack_spec
from repo_common.config_cli import ConfigParser
from repo_common.file_permissions import describe
from repo_train.data.config import legacy_source_message
from repo_train.training.cli import plan_arguments
from repo_train.training.plan import TrainingPlan
from workflows.loop_config import AFTER_SEARCH, DATA_DIR_HINT, PLACEHOLDERS, LoopConfig, LoopConfigError, fill


def check_training(config: LoopConfig, root: Path) -> dict[str, TrainingPlan]:
    """Each train run's LightningCLI config and `train.args`, judged now by `python -m repo_train fit`'s own parser
    and its checks that need no model (unknown or misspelt keys, wrong types, a broken file, the checkpoint
    interval, the batch split), so the second run's typo does not stop the loop after the first run's hours of
    training; then planned on the loop's GPUs (`repo_train.training.plan`): a run predicted not to fit the GPU
    memory its config names is refused with the options that would. The run directory and the base are the
    loop's own and not judged here; what needs the model or the data is left to the run itself. Returns each
    run's plan, which the dry run prints."""
    stand_in = dict.fromkeys(PLACEHOLDERS, "1")
    plans = {}
    for name, train_config in config.train.methods.items():
        argv = ["fit", "--config", str(root / train_config), *(fill(arg, stand_in) for arg in config.train.args)]
        try:
            plans[name] = plan_arguments(argv, world_size=config.gpus)
            refused = plans[name].refusal()
        except PermissionError as err:
            refused = describe(err)
        except (ValueError, OSError) as err:
            refused = str(err)
        if refused is None:
            continue
        given = " with train.args" if config.train.args else ""
        on = f" on {config.gpus} GPU{'s' * (config.gpus > 1)}" if name in plans else ""
        raise LoopConfigError(f"train.methods.{name} ({train_config}){given}{on}: {refused}")
    return plans


def machine_problems(config: LoopConfig, root: Path, values: dict[str, str]) -> list[str]:
    """What is missing on this machine: the base checkpoint, the launchers (fatal for a real run, a dry-run warning)."""
    problems = []
    if config.data_dir and not (root / config.data_dir).is_dir():
        problems.append(f"{config.path}: data_dir: {config.data_dir} is not a directory here; {DATA_DIR_HINT}")
    if not (root / config.base / "config.json").is_file():
        problems.append(
            f"{config.path}: base: {config.base} is not an HF model directory (no config.json); put the checkpoint there or point base at it"
        )
    launchers = (
        ("train.launcher", config.train.launcher),
        ("search.launcher", config.search.launcher),
        ("evaluate.launcher", config.evaluate.launcher),
    )
    for key, launcher in launchers:
        program = fill(launcher[0], values)
        found = (
            (root / program).is_file() and os.access(root / program, os.X_OK)
            if "/" in program
            else shutil.which(program)
        )
        if not found:
            problems.append(f"{config.path}: {key}: {program} is not an executable here")
    problems += [f"{config.path}: {problem}" for problem in data_problems(config, root, values)]
    return problems


def data_problems(config: LoopConfig, root: Path, values: dict[str, str]) -> list[str]:
    """The data each step reads, checked before the first step: the train configs' shard lists and folders
    (`mix_file` and `paths` of `data.train` and `data.val`) and the `--data_dir` of the search and
    evaluation arguments. A typo here would otherwise stop the loop after hours of training."""
    problems = []
    for name, train_config in config.train.methods.items():
        data = (yaml.safe_load((root / train_config).read_text()) or {}).get("data") or {}
        for split in ("train", "val"):
            source = data.get(split) or {}
            if "source" in source:  # the old form: training would refuse it, say so now
                problems.append(
                    f"train.methods.{name} ({train_config}): {legacy_source_message(source, f'data.{split}')}"
                )
                continue
            options = source.get("init_args") or {}
            named = [("mix_file", options.get("mix_file"))] + [("paths", path) for path in options.get("paths") or []]
            for key, value in named:
                if value and not any(ch in str(value) for ch in "*?[") and not (root / str(value)).exists():
                    problems.append(
                        f"train.methods.{name} ({train_config}): data.{split}.init_args.{key}: {value} does not "
                        "exist here (configs/data/README.md says how to prepare it)"
                    )
    for key, args, option in (("search.args", config.search.args, "--task.data_dir"),
                              ("evaluate.args", config.evaluate.args, "--data_dir")):  # fmt: skip
        for flag, value in itertools.pairwise(args):
            if flag == option and "{data_dir}" not in value and not (root / fill(value, values)).is_dir():
                problems.append(f"{key}: {option} {value} is not a directory here (docs/evaluation.md: the data)")
    return problems


def release_stand_in(arg: str) -> str:
    """`mdqa_release` in a --tasks value checked as `mdqa`: the release's files live only in the run's data folder
    (checked by `machine_problems`), and the package's sample, which stands in for it here, has none; both tasks
    take the same options."""
    names = arg.split(",")
    return (
        ",".join("mdqa" if name.strip() == "mdqa_release" else name for name in names)
        if "mdqa_release" in names
        else arg
    )


def check_evaluations(config: LoopConfig) -> None:
    """Every evaluation the loop will run, checked now as `python -m evaluation run` would check it (in a dry run
    too): its options (`evaluate.args`), tasks and task parameters, and each method stack of `evaluate.methods`
    (a method known only after the search, `{scale_file}` / `{mean_scale}`, by its name and parameter names).
    The model and the data are the run's own and checked elsewhere (`machine_problems`): here the tiny default
    and the packaged data stand in. A mistake is a `LoopConfigError` naming the key and the harness's message."""
    stand_in = dict.fromkeys(PLACEHOLDERS, "1") | AFTER_SEARCH_STAND_INS
    for name, specs in config.evaluate.methods.items():
        key = f"evaluate.methods.{name}"
        now = []
        for spec in specs:
            checked = []  # the stack's parts whose every value is known now: checked with their values below
            for raw, part in zip(split_stack_spec(spec), split_stack_spec(fill(spec, stand_in))):
                if SCALE_FILE not in raw:
                    checked.append(part)
                    continue
                method, params = _spec_parts(part, key, parse_method_spec)  # a file made by the search: names only
                try:
                    METHODS.check_name(method)
                except ValueError as err:
                    raise LoopConfigError(f"{key}: {err}") from None
                unknown = sorted(set(params) - {f.name for f in spec_fields(METHODS[method])})
                if unknown:
                    raise LoopConfigError(f"{key}: unknown parameter(s) {unknown} for method {method!r} in {spec!r}")
            now += ["+".join(checked)] if checked else []
        argv = [release_stand_in(fill(arg, stand_in)) for arg in config.evaluate.args]
        argv += [flag for spec in now for flag in ("--methods", spec)] + ["--out", "unused"]
        help_text, add_options, _ = COMMANDS["run"]
        parser = ConfigParser.for_command("python -m evaluation run", help_text)
        add_options(parser)
        try:
            options = parser.parse_or_raise(argv)
            options.model, options.data_dir = None, None  # stand-ins: checked by machine_problems
            resolve(options)
        except (ValueError, OSError) as err:
            raise LoopConfigError(f"evaluate.args / {key}: {err}") from None


#: The search's outputs stand in for the check by values of their type: `{mean_scale}` by a scale every method
#: takes (so `pi:scale={mean_scale}+pcd:gamma=-5` is judged on pcd's gamma now, not after the search); a part
#: naming `{scale_file}` is judged by its method's name and parameter names, since the file does not exist yet.
SCALE_FILE = "{scale_file}"
AFTER_SEARCH_STAND_INS = {"mean_scale": "1.5", "scale_file": "scale-file-of-the-search.json"}
assert set(AFTER_SEARCH_STAND_INS) == set(AFTER_SEARCH)


def _spec_parts(spec: str, key: str, parse) -> tuple[str, dict]:
    try:
        return parse(spec)
    except ValueError as err:
        raise LoopConfigError(f"{key}: {err}") from None
