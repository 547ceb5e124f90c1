"""The full-scale quickstart loop's sections: typed dataclasses, read by jsonargparse; their own checks.

`python -m workflows quickstart --config FILE` runs the built-in loop (train with
RoPE and REPO, export, LPES search, evaluate, report) on a real checkpoint with
the project's launchers. FILE is the quickstart's config file like any other
(docs/configuring.md): `base` plus the three sections below, whose keys and
types jsonargparse checks. The file only names things that exist elsewhere
(the base checkpoint, LightningCLI and search configs, launcher commands,
harness options), so a mistake in it would otherwise surface hours into a GPU
run: each section checks its values when built (run names, placeholders,
options the loop sets itself) and `check_files` the repository files it names;
workflows/loop_checks.py checks the train configs as `fit` would parse them,
the evaluations as the harness would resolve them, and what exists only on
the GPU machine. Every problem is a `LoopConfigError` naming the key and the
fix. The documented example is configs/quickstart/olmo2-1b.yaml.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path

#: The name under which the base checkpoint is searched and evaluated (not usable as a training run's name).
BASE_MODEL = "base"
#: Placeholders every command string may use, and those known only after the search (evaluation strings only).
PLACEHOLDERS = ("out", "base", "python", "data_dir", "gpus")
AFTER_SEARCH = ("scale_file", "mean_scale")
#: Options the loop sets itself; in an `args` list they would clash with (or silently beat) the loop's own.
RESERVED = {
    "train.args": ("--config", "--trainer.default_root_dir", "--model.init_from"),
    "search.args": ("--model.path", "--config", "--out"),
    "evaluate.args": ("--model", "--methods", "--out", "--example_offset"),
}
#: What `data_dir` must hold, and where to get it (named when it is missing).
DATA_DIR_HINT = (
    "put the Lost in the Middle release's qa_data folder there (nq-open-oracle.jsonl.gz; "
    "git clone https://github.com/nelson-liu/lost-in-the-middle, docs/evaluation.md#data-preparation) "
    "or pass --data_dir DIR"
)
#: A YAML list item may be a number (`[--num_keys, 8]`); the loop passes it on as text.
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
    """Extra search options (not --model.path, --config, --out)."""

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
    """Options of every evaluation run (not --model, --method, --out, nor --example_offset: the loop starts
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


def fill(value: str, values: dict[str, str]) -> str:
    """Fill `{name}` placeholders (`load` has checked that every name used is one the caller provides)."""
    return value.format_map(values)


def mean_scale(scale_file: Path) -> float:
    """The mean of an LPES scale file's per-layer scales: PI at this one scale is the search's control."""
    data = json.loads(Path(scale_file).read_text())
    return sum(data["scales"]) / int(data["num_layers"])
