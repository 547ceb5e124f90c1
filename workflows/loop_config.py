"""The full-scale quickstart loop's sections: typed dataclasses, read by jsonargparse; their own checks.

`python -m workflows quickstart --config FILE` runs the built-in loop (train with
RoPE and REPO, export, LPES search, evaluate, report) on a real checkpoint with
the project's launchers. FILE is the quickstart's config file like any other
(docs/configuring.md): `base` plus the three sections below, whose keys and
types jsonargparse checks. The file only names things that exist elsewhere
(the base checkpoint, LightningCLI and search configs, launcher commands,
harness options), so a mistake in it would otherwise surface hours into a GPU
run: each section checks its values when built (run names, placeholders,
options the loop sets itself), `check_files` the repository files it names,
`check_training` the train configs as `fit` would parse them, and
`machine_problems` what exists only on the GPU machine. Every problem is a
`LoopConfigError` naming the key and the fix. The documented example is
configs/quickstart/olmo2-1b.yaml.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from repo_common.file_permissions import describe

#: The name under which the base checkpoint is searched and evaluated (not usable as a training run's name).
BASE_MODEL = "base"
#: Placeholders every command string may use, and those known only after the search (evaluation strings only).
PLACEHOLDERS = ("out", "base", "python", "data_dir", "gpus")
AFTER_SEARCH = ("scale_file", "mean_scale")
#: Options the loop sets itself; in an `args` list they would clash with (or silently beat) the loop's own.
RESERVED = {
    "train.args": ("--config", "--trainer.default_root_dir", "--model.init_from"),
    "search.args": ("--model", "--config", "--out"),
    "evaluate.args": ("--model", "--method", "--out", "--example-offset", "--example_offset"),
}
#: What `data_dir` must hold, and where to get it (named when it is missing).
DATA_DIR_HINT = (
    "put the Lost in the Middle release's qa_data folder there (nq-open-oracle.jsonl.gz; "
    "git clone https://github.com/nelson-liu/lost-in-the-middle, docs/evaluation.md#data-preparation) "
    "or pass --data_dir DIR"
)
#: A YAML list item may be a number (`[--num-keys, 8]`); the loop passes it on as text.
Word = str | int | float


class LoopConfigError(ValueError):
    """A quickstart loop file that cannot run; the message names the key and the fix."""


def _text(value: Word, key: str, allowed: tuple[str, ...] = PLACEHOLDERS) -> str:
    """`value` as text whose `{placeholders}` are all in `allowed`."""
    value = str(value)
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(value) if name is not None]
    except ValueError as err:
        raise LoopConfigError(f"{key}: {value!r}: {err} (write a literal brace as {{{{ or }}}})") from None
    for name, spec, conversion in fields:
        if name not in allowed:
            raise LoopConfigError(f"{key}: unknown placeholder {{{name}}} in {value!r}; use {', '.join(allowed)}")
        if spec or conversion:  # `{out:>99999999999}` would build a string of that width when filled
            given = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise LoopConfigError(
                f"{key}: placeholder {given} in {value!r} has a format spec or conversion; write plain {{{name}}}"
            )
    return value


def _argv(values: list[Word], key: str, *, required: bool = False, allowed=PLACEHOLDERS) -> list[str]:
    """A command-line list: placeholders checked, options the loop sets itself refused."""
    if required and not values:
        raise LoopConfigError(f"{key}: must be a non-empty list of strings (YAML [a, b])")
    items = [_text(v, f"{key}[{i}]", allowed) for i, v in enumerate(values)]
    for item in items:
        if item.split("=")[0] in RESERVED.get(key, ()):
            raise LoopConfigError(f"{key}: {item.split('=')[0]} is set by the loop itself; remove it")
    return items


@dataclass
class TrainSection:
    """The continual-training runs: one LightningCLI config per run, all started by one launcher."""

    launcher: list[Word]
    """The command a train config is appended to, e.g. [scripts/launch_train.sh]."""
    methods: dict[str, str]
    """Run name -> LightningCLI config, e.g. {rope: configs/train/olmo2-1b-stage2-rope.yaml}."""
    args: list[Word] = field(default_factory=list)
    """Extra LightningCLI overrides for every run (not --config, --trainer.default_root_dir, --model.init_from)."""

    def __post_init__(self) -> None:
        self.launcher = _argv(self.launcher, "train.launcher", required=True)
        self.args = _argv(self.args, "train.args")
        if not self.methods:
            raise LoopConfigError("train.methods: must name at least one run, e.g. {rope: configs/train/...yaml}")
        for name, path in self.methods.items():
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)) or name == BASE_MODEL:
                raise LoopConfigError(
                    f"train.methods.{name}: rename it: a run name is used in paths (letters, digits, _ . -) and "
                    f"{BASE_MODEL} is the base's"
                )
            _text(path, f"train.methods.{name}", ())


@dataclass
class SearchSection:
    """The LPES search on one of the models."""

    model: str
    """The model to search: a run of train.methods, or base."""
    launcher: list[Word]
    """The search command, e.g. [scripts/run_search.sh]."""
    config: str
    """The LPES config, e.g. configs/search/lpes.yaml."""
    args: list[Word] = field(default_factory=list)
    """Extra search options (not --model, --config, --out)."""

    def __post_init__(self) -> None:
        self.launcher = _argv(self.launcher, "search.launcher", required=True)
        self.args = _argv(self.args, "search.args")
        _text(self.config, "search.config", ())


@dataclass
class EvaluateSection:
    """The harness runs: per model, the method stacks to evaluate."""

    methods: dict[str, list[Word]]
    """Model name (a run, or base) -> harness methods, e.g. {rope: [baseline, "lpes:scale_file={scale_file}"]}."""
    args: list[Word] = field(default_factory=list)
    """Options of every evaluation run (not --model, --method, --out, nor --example-offset: the loop starts
    the evaluation's examples after the search's, read from the search config)."""
    launcher: list[Word] = field(default_factory=lambda: ["scripts/run_evaluation.sh"])
    """The evaluation command, e.g. [scripts/run_evaluation.sh] (torchrun on `gpus` processes)."""
    at_once: int = 1
    """Evaluations that share the node at the same time, each on its own gpus / at_once GPUs
    (CUDA_VISIBLE_DEVICES, NPROC_PER_NODE and MASTER_PORT of its own); 1 = one after the other on every GPU."""

    def __post_init__(self) -> None:
        self.launcher = _argv(self.launcher, "evaluate.launcher", required=True)
        allowed = PLACEHOLDERS + AFTER_SEARCH
        if not self.methods:
            raise LoopConfigError("evaluate.methods: must name at least one model, e.g. {rope: [baseline]}")
        self.methods = {
            name: _argv(specs, f"evaluate.methods.{name}", required=True, allowed=allowed)
            for name, specs in self.methods.items()
        }
        self.args = _argv(self.args, "evaluate.args", allowed=allowed)


@dataclass
class LoopConfig:
    """A whole full-scale loop: what `--config FILE` of the quickstart holds (with `base`)."""

    base: str
    train: TrainSection
    search: SearchSection
    evaluate: EvaluateSection
    path: str = "the loop config"
    """Where it was read from (named in messages)."""
    gpus: int = 1
    """GPUs of the node: every launcher (training, search, evaluation) starts this many processes."""
    data_dir: str | None = None
    """The Lost in the Middle release's qa_data folder, `{data_dir}` in the search and evaluation arguments."""

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise LoopConfigError(f"gpus: must be the number of GPUs of the node (an int >= 1), got {self.gpus!r}")
        at_once = self.evaluate.at_once
        if isinstance(at_once, bool) or not isinstance(at_once, int) or at_once < 1 or self.gpus % at_once:
            raise LoopConfigError(
                f"evaluate.at_once: must divide gpus ({self.gpus}) into equal slices (an int >= 1), got {at_once!r}"
            )
        uses = [item for item in (*self.search.args, *self.evaluate.args) if "{data_dir}" in item]
        if uses and not self.data_dir:
            raise LoopConfigError(f"data_dir: not set, but the arguments use {{data_dir}}; {DATA_DIR_HINT}")
        models = [*self.train.methods, BASE_MODEL]
        if self.search.model not in models:
            raise LoopConfigError(f"search.model: {self.search.model!r} is not one of {', '.join(models)}")
        for name in self.evaluate.methods:
            if name not in models:
                raise LoopConfigError(f"evaluate.methods.{name}: not a model; use one of {', '.join(models)}")


def check_files(config: LoopConfig, root: Path) -> None:
    """The repository files the loop names exist (relative paths are taken from `root`, where commands run)."""
    named = {f"train.methods.{name}": path for name, path in config.train.methods.items()}
    for key, value in {**named, "search.config": config.search.config}.items():
        if not (root / value).is_file():  # an absolute value stays absolute
            raise LoopConfigError(f"{key}: {value} does not exist (relative paths are taken from {root})")


def check_training(config: LoopConfig, root: Path) -> None:
    """Each train run's LightningCLI config and `train.args`, judged now by `python -m repo_train fit`'s own parser
    and its checks that need no model (`repo_train.training.cli.check_arguments`: unknown or misspelt keys, wrong
    types, a broken file, the checkpoint interval, the batch split), so the second run's typo does not stop the
    loop after the first run's hours of training. The run directory and the base are the loop's own and not
    judged here; what needs the model or the data is left to the run itself. Loads Lightning (seconds)."""
    from repo_train.training.cli import check_arguments  # Lightning: only when a loop file is checked

    stand_in = dict.fromkeys(PLACEHOLDERS, "1")
    for name, train_config in config.train.methods.items():
        argv = ["fit", "--config", str(root / train_config), *(fill(arg, stand_in) for arg in config.train.args)]
        try:
            check_arguments(argv, root_dir=False)
        except PermissionError as err:
            refused = describe(err)
        except (ValueError, OSError) as err:
            refused = str(err)
        else:
            continue
        given = " with train.args" if config.train.args else ""
        raise LoopConfigError(f"train.methods.{name} ({train_config}){given}: {refused}")


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
    (`mix_file` and `paths` of `data.train` and `data.val`) and the `--data-dir` of the search and
    evaluation arguments. A typo here would otherwise stop the loop after hours of training."""
    problems = []
    for name, train_config in config.train.methods.items():
        data = (yaml.safe_load((root / train_config).read_text()) or {}).get("data") or {}
        for split in ("train", "val"):
            source = data.get(split) or {}
            if "source" in source:  # the old form: training would refuse it, say so now
                from repo_train.data.config import legacy_source_message  # heavy: keeps --help fast (torch, datasets)

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
    for key, args in (("search.args", config.search.args), ("evaluate.args", config.evaluate.args)):
        for flag, value in itertools.pairwise(args):
            if flag == "--data-dir" and "{data_dir}" not in value and not (root / fill(value, values)).is_dir():
                problems.append(f"{key}: --data-dir {value} is not a directory here (docs/evaluation.md: the data)")
    return problems


def check_evaluations(config: LoopConfig) -> None:
    """Every evaluation the loop will run, checked now as `python -m evaluation run` would check it (in a dry run
    too): its options (`evaluate.args`), tasks and task parameters, and each method stack of `evaluate.methods`
    (a method known only after the search, `{scale_file}` / `{mean_scale}`, by its name and parameter names).
    The model and the data are the run's own and checked elsewhere (`machine_problems`): here the tiny default
    and the packaged data stand in. A mistake is a `LoopConfigError` naming the key and the harness's message."""

    from evaluation.cli import COMMANDS  # heavy: the harness's metrics (nltk, sklearn); keeps quickstart --help fast
    from evaluation.config import resolve  # heavy: the harness's metrics (nltk, sklearn); keeps quickstart --help fast
    from evaluation.methods.base import (  # heavy: torch and the model core; keeps quickstart --help fast
        METHODS,
        parse_method_spec,
        spec_fields,
        split_stack_spec,
    )
    from repo_common.config_cli import ConfigParser  # heavy: jsonargparse, only when a loop file is checked

    stand_in = dict.fromkeys(PLACEHOLDERS + AFTER_SEARCH, "1")
    for name, specs in config.evaluate.methods.items():
        key = f"evaluate.methods.{name}"
        now = []
        for spec in specs:
            if not any(f"{{{placeholder}}}" in spec for placeholder in AFTER_SEARCH):
                now.append(spec)
                continue
            for part in split_stack_spec(fill(spec, stand_in)):  # checked by name and keys: its values come later
                method, params = _spec_parts(part, key, parse_method_spec)
                if method not in METHODS:
                    raise LoopConfigError(f"{key}: unknown method {method!r}; registered methods are {sorted(METHODS)}")
                unknown = sorted(set(params) - {f.name for f in spec_fields(METHODS[method])})
                if unknown:
                    raise LoopConfigError(f"{key}: unknown parameter(s) {unknown} for method {method!r} in {spec!r}")
        argv = [fill(arg, stand_in) for arg in config.evaluate.args]
        argv += [flag for spec in now for flag in ("--method", spec)] + ["--out", "unused"]
        help_text, add_options, _ = COMMANDS["run"]
        parser = ConfigParser.for_command("python -m evaluation run", help_text)
        add_options(parser)
        try:
            options = parser.parse_or_raise(argv)
            options.model, options.data_dir = None, None  # stand-ins: checked by machine_problems
            resolve(options)
        except (ValueError, OSError) as err:
            raise LoopConfigError(f"evaluate.args / {key}: {err}") from None


def _spec_parts(spec: str, key: str, parse) -> tuple[str, dict]:
    try:
        return parse(spec)
    except ValueError as err:
        raise LoopConfigError(f"{key}: {err}") from None


def fill(value: str, values: dict[str, str]) -> str:
    """Fill `{name}` placeholders (`load` has checked that every name used is one the caller provides)."""
    return value.format_map(values)


def mean_scale(scale_file: Path) -> float:
    """The mean of an LPES scale file's per-layer scales: PI at this one scale is the search's control."""
    data = json.loads(Path(scale_file).read_text())
    return sum(data["scales"]) / int(data["num_layers"])
