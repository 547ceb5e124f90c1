"""The config file of the full-scale quickstart loop: schema, validation, placeholders.

`python scripts/quickstart.py --config FILE` runs the built-in loop (train with
RoPE and REPO, export, LPES search, evaluate, report) on a real checkpoint with
the project's launchers. The file only names things that exist elsewhere (the
base checkpoint, LightningCLI and search configs, launcher commands, harness
options), so a mistake in it would otherwise surface hours into a GPU run:
everything that can be checked is checked here first and reported as one line
naming the key and the fix (a `SystemExit`, no traceback). The documented
example is configs/quickstart/olmo2-1b.yaml.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
from dataclasses import dataclass
from pathlib import Path

import yaml

#: The name under which the base checkpoint is searched and evaluated (not usable as a training run's name).
BASE_MODEL = "base"
#: Placeholders every command string may use, and those known only after the search (evaluation strings only).
PLACEHOLDERS = ("out", "base", "python")
AFTER_SEARCH = ("scale_file", "mean_scale")
#: Each section's keys (True = required); unknown keys are refused, as LightningCLI does.
SCHEMA = {
    "": {"base": True, "train": True, "search": True, "evaluate": True},
    "train": {"launcher": True, "methods": True, "args": False},
    "search": {"model": True, "launcher": True, "config": True, "args": False},
    "evaluate": {"methods": True, "args": False},
}
#: What to write for a missing key.
HINTS = {
    "base": "the HF directory training continues from, e.g. checkpoints/OLMo-2-0425-1B-stage1-step1907359",
    "train": "a section with launcher and methods",
    "search": "a section with model, launcher and config",
    "evaluate": "a section with methods",
    "train.launcher": "the command the train config is appended to, e.g. [scripts/launch_train.sh]",
    "train.methods": "name -> LightningCLI config, e.g. {rope: configs/train/olmo2-1b-stage2-rope.yaml}",
    "search.model": "the trained model to search, one of train.methods or base",
    "search.launcher": "the search command, e.g. [scripts/run_search.sh]",
    "search.config": "the LPES config, e.g. configs/search/lpes.yaml",
    "evaluate.methods": "model name -> harness methods, e.g. {rope: [baseline], base: [baseline]}",
}
#: Options the loop sets itself; in an `args` list they would clash with (or silently beat) the loop's own.
RESERVED = {
    "train.args": ("--config", "--trainer.default_root_dir", "--model.init_from"),
    "search.args": ("--model", "--config", "--out"),
    "evaluate.args": ("--model", "--method", "--out"),
}


@dataclass(frozen=True)
class Train:
    launcher: list[str]
    methods: dict[str, str]
    args: list[str]


@dataclass(frozen=True)
class Search:
    model: str
    launcher: list[str]
    config: str
    args: list[str]


@dataclass(frozen=True)
class Evaluate:
    methods: dict[str, list[str]]
    args: list[str]


@dataclass(frozen=True)
class LoopConfig:
    path: Path
    base: str
    train: Train
    search: Search
    evaluate: Evaluate


def load(path: Path, root: Path) -> LoopConfig:
    """Read and check FILE: keys, types, placeholders, and that the repository files it names exist.

    Relative paths (FILE's too) are taken from `root`, where every command runs.
    The base checkpoint and the launchers may exist only on the GPU machine:
    `machine_problems` checks them apart, so that a dry run works on any machine.
    """
    path = Path(path)
    if not (root / path).is_file():
        raise SystemExit(f"--config {path}: no such file (relative paths are taken from {root})")
    try:
        raw = yaml.safe_load((root / path).read_text())
    except yaml.YAMLError as err:
        raise SystemExit(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None

    def fail(key: str, problem: str) -> SystemExit:
        return SystemExit(f"{path}: {key}: {problem}")

    def section(value, name: str) -> dict:
        if not isinstance(value, dict):
            raise fail(name or "the file", "must be a mapping of keys")
        prefix = f"{name}." if name else ""
        for key in value:
            if key not in SCHEMA[name]:
                raise fail(f"{prefix}{key}", f"unknown key; the keys here are {', '.join(SCHEMA[name])}")
        for key, required in SCHEMA[name].items():
            if required and value.get(key) is None:
                raise fail(f"{prefix}{key}", f"missing; add {HINTS[prefix + key]}")
        return value

    def text(value, key: str, allowed=PLACEHOLDERS) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise fail(key, f"must be a string, got {value!r}")
        value = str(value)
        try:
            names = [field for _, field, _, _ in string.Formatter().parse(value) if field is not None]
        except ValueError as err:
            raise fail(key, f"{value!r}: {err} (write a literal brace as {{{{ or }}}})") from None
        for name in names:
            if name not in allowed:
                raise fail(key, f"unknown placeholder {{{name}}} in {value!r}; use {', '.join(allowed)}")
        return value

    def argv(value, key: str, *, empty: bool = True, allowed=PLACEHOLDERS) -> list[str]:
        value = [] if value is None and empty else value
        if not isinstance(value, list) or (not value and not empty):
            raise fail(key, f"must be a {'' if empty else 'non-empty '}list of strings (YAML [a, b]), got {value!r}")
        items = [text(v, f"{key}[{i}]", allowed) for i, v in enumerate(value)]
        for item in items:
            if item.split("=")[0] in RESERVED.get(key, ()):
                raise fail(key, f"{item.split('=')[0]} is set by the loop itself; remove it")
        return items

    def mapping(value, key: str) -> dict:
        if not isinstance(value, dict) or not value:
            raise fail(key, f"must be a non-empty mapping, got {value!r}")
        return value

    top = section(raw, "")
    train, search, evaluate = (section(top[name], name) for name in ("train", "search", "evaluate"))
    methods = {}
    for name, config in mapping(train["methods"], "train.methods").items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)) or name == BASE_MODEL:
            raise fail(
                f"train.methods.{name}",
                f"rename it: a run name is used in paths (letters, digits, _ . -) and {BASE_MODEL} is the base's",
            )
        methods[name] = _repo_file(text(config, f"train.methods.{name}", ()), f"train.methods.{name}", root, fail)
    models = [*methods, BASE_MODEL]
    search_model = text(search["model"], "search.model", ())
    if search_model not in models:
        raise fail("search.model", f"{search_model!r} is not one of {', '.join(models)}")
    evaluated = {}
    for name, specs in mapping(evaluate["methods"], "evaluate.methods").items():
        if name not in models:
            raise fail(f"evaluate.methods.{name}", f"not a model; use one of {', '.join(models)}")
        evaluated[name] = argv(specs, f"evaluate.methods.{name}", empty=False, allowed=PLACEHOLDERS + AFTER_SEARCH)
    return LoopConfig(
        path=path,
        base=text(top["base"], "base", ()),
        train=Train(
            argv(train["launcher"], "train.launcher", empty=False), methods, argv(train.get("args"), "train.args")
        ),
        search=Search(
            search_model,
            argv(search["launcher"], "search.launcher", empty=False),
            _repo_file(text(search["config"], "search.config", ()), "search.config", root, fail),
            argv(search.get("args"), "search.args"),
        ),
        evaluate=Evaluate(evaluated, argv(evaluate.get("args"), "evaluate.args", allowed=PLACEHOLDERS + AFTER_SEARCH)),
    )


def _repo_file(value: str, key: str, root: Path, fail) -> str:
    if not (root / value).is_file():  # an absolute value stays absolute
        raise fail(key, f"{value} does not exist (relative paths are taken from {root})")
    return value


def machine_problems(config: LoopConfig, root: Path, values: dict[str, str]) -> list[str]:
    """What is missing on this machine: the base checkpoint, the launchers (fatal for a real run, a dry-run warning)."""
    problems = []
    if not (root / config.base / "config.json").is_file():
        problems.append(
            f"{config.path}: base: {config.base} is not an HF model directory (no config.json); put the checkpoint there or point base at it"
        )
    for key, launcher in (("train.launcher", config.train.launcher), ("search.launcher", config.search.launcher)):
        program = fill(launcher[0], values)
        found = (
            (root / program).is_file() and os.access(root / program, os.X_OK)
            if "/" in program
            else shutil.which(program)
        )
        if not found:
            problems.append(f"{config.path}: {key}: {program} is not an executable here")
    return problems


def fill(value: str, values: dict[str, str]) -> str:
    """Fill `{name}` placeholders (`load` has checked that every name used is one the caller provides)."""
    return value.format_map(values)


def mean_scale(scale_file: Path) -> float:
    """The mean of an LPES scale file's per-layer scales: PI at this one scale is the search's control."""
    data = json.loads(Path(scale_file).read_text())
    return sum(data["scales"]) / int(data["num_layers"])
