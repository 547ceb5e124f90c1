"""What one evaluation run is: `RunConfig`, whose fields are the options of `python -m evaluation run`, the
decode settings of each task (`RunConfig.settings`), and the checks of its options that need no model.

Plain Python, no torch or `datasets`: `evaluation run --help` reads the options from `RunConfig`, and
`--print_config` and a refusal of an option come without loading the model code; the runner
(`evaluation.runner`), which needs torch, imports these names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

from jsonargparse.typing import NonNegativeInt, PositiveInt

from evaluation.decode_settings import DecodeSettings
from evaluation.devices import Device
from evaluation.methods import Method, MethodStack, parse_value
from evaluation.methods.base import refuse_generation_hooks
from evaluation.prompt_format import PromptFormat
from evaluation.tasks import GRID_NAMES, TASKS, Task, build_task, refuse_renamed_grid
from repo_common.config_cli import Seed, class_entry

#: The score that teacher-forces each row's gold answer instead of generating (`RunConfig.score`).
GOLD_LOGLIK = "gold_loglik"
#: How a run scores a prompt of a generation task.
Score = Literal["metric", "gold_loglik"]
SCORES = get_args(Score)
#: Defaults when no model is given: the random tiny model only needs to run the pipeline, quickly. They size
#: every task that takes them, its own defaults or not (the random model's answers are noise at any size).
TINY_DEFAULTS = dict(num_examples=2, num_documents=3, num_keys=4, max_new_tokens=8)
#: The command's defaults (the Lost in the Middle settings and the CALIOPE grid) for a parameter the user did not
#: set and the task declares no default for: a task's own default (`babi`'s `gold_positions: all`) wins.
COMMAND_DEFAULTS = dict(num_documents=20, num_keys=75, gold_positions="ends-20-50-80")
#: Field metadata: the option only spells out short-form tasks (`tasks: kv`); the stored config leaves it out,
#: since the tasks' init_args hold what it set.
SHORT_FORM = {"short_form": True}
#: Field metadata: a setting for Python callers, not an option of `evaluation run`.
PYTHON_ONLY = {"option": False}


def score_name(metric: str | None) -> str:
    """What a summary's per-method `accuracy` numbers are, for tables and axes: accuracy under a task's metric,
    or the gold answer's mean log-probability per token under `--score gold_loglik`, with its unit."""
    return "gold log-likelihood (nats per token)" if metric == GOLD_LOGLIK else "accuracy"


def score_key(metric: str | None) -> str:
    """The score's short name for file names and `key=value` lines: `accuracy` or `gold_loglik`."""
    return GOLD_LOGLIK if metric == GOLD_LOGLIK else "accuracy"


@dataclass(kw_only=True)
class RunConfig:
    """One evaluation run (`EvalConfig`). Each field is an option of `python -m evaluation run` (its docstring is
    the option's help) and a key of its config files; the run stores it as OUT/config.yaml (`to_config`).

    The command builds it once from its options or YAML (`evaluation.config.resolve`) and the runner works on
    its objects. The short forms are parsed here, once: `tasks` as comma-separated names (with the short-form
    options below) or, from Python, `{name: build_task parameters}`; `methods` as spec strings ('baseline',
    'pi:scale=2', 'a+b:k=v'), `Method` objects or lists of them (a stack), or `MethodStack` objects.
    """

    model: str | None = None
    """local HF model directory (default: the tiny random model)"""
    out: str
    """output directory (resumes an earlier run's)"""
    tasks: list[Task] | str = "mdqa"
    """task classes, or the short form: comma-separated task names (listed below); one task per name"""
    methods: list[str | Method | list[Method]] = field(default_factory=lambda: ["baseline"])
    """method stacks: specs (NAME[:k=v,...][+NAME2...]) or classes; --methods SPEC (repeatable) replaces the list;
    each stack's label keys its records"""
    num_examples: PositiveInt | None = field(default=None, metadata=SHORT_FORM)
    """source examples per task (short-form tasks only)"""
    example_offset: NonNegativeInt | None = field(default=None, metadata=SHORT_FORM)
    """skip this many source examples first, e.g. the questions an LPES search used (short-form tasks only)"""
    num_documents: PositiveInt | None = field(default=None, metadata=SHORT_FORM)
    """documents per MDQA prompt (short-form tasks only)"""
    num_keys: PositiveInt | None = field(default=None, metadata=SHORT_FORM)
    """KV pairs per prompt (short-form tasks only)"""
    gold_positions: list[int] | str | None = field(default=None, metadata=SHORT_FORM)
    """a grid name (listed below) or comma-separated 0-based ints (default: the task's own; ends-20-50-80 for a
    task without one; short-form tasks only)"""
    task_param: list[str] = field(default_factory=list, metadata=SHORT_FORM)
    """TASK:key=value, repeatable (short-form tasks only)"""
    data_dir: str | None = None
    """folder with the tasks' data files"""
    seed: Seed = 0
    """seed of distractors / generated keys / tiny weights"""
    batch_size: PositiveInt = 8
    """prompts per forward"""
    max_new_tokens: PositiveInt | None = None
    """default: per task"""
    max_length: PositiveInt | None = None
    """prompt + new tokens (default: model's)"""
    truncate: Literal["middle", "left"] | None = None
    """truncate too-long prompts (default: error)"""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """auto = bfloat16 on a GPU, float32 on the CPU (run.json records the one used)"""
    attn_implementation: str = "sdpa"
    """sdpa, eager or flash_attention_2"""
    device: Device = "auto"
    """auto = cuda:LOCAL_RANK when CUDA is present (where a model the run loads goes; not a result setting)"""
    chat_template: bool = False
    """wrap each prompt in the tokenizer's chat template (as lm-eval's --apply_chat_template)"""
    system_prompt: str | None = None
    """system message of the chat template"""
    score: Score = "metric"
    """metric: the task's metric of each greedy answer; gold_loglik: the gold answer's mean log-probability per
    token, teacher-forced through each method (no generation; more power on a weak model)"""
    allow_search_overlap: bool = False
    """score a searched method (lpes) on examples its search used; the report then says so"""
    allow_other_model_scales: bool = False
    """apply an lpes scale file searched for another model (refused otherwise; the run then says so)"""
    max_records: PositiveInt | None = None
    """stop after N new records (rerun to resume)"""
    no_progress: bool = False
    """no progress bars"""
    no_report: bool = False
    """skip plots and report.md"""
    bootstrap_resamples: int = field(default=1000, metadata=PYTHON_ONLY)
    """Resamples of the summary's paired bootstrap."""

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {list(SCORES)}, got {self.score!r}")
        PromptFormat(self.chat_template, self.system_prompt)  # a system prompt without the template: refused
        self.methods = [_method_stack(entry) for entry in self.methods]  # a bad spec first
        if not self.methods:  # a run of no method would load the model and write empty records
            raise ValueError("--methods is an empty list: name at least one method (e.g. --methods baseline)")
        if isinstance(self.tasks, str):
            self.tasks = short_form_tasks(self)
        elif isinstance(self.tasks, Mapping):  # {name: build_task parameters}
            self.tasks = [build_task(name, **dict(params)) for name, params in self.tasks.items()]
        self.tasks = list(self.tasks)
        for task in self.tasks:
            if not isinstance(task, Task):
                raise TypeError(f"RunConfig.tasks: expected Task instances (or {{name: params}}), got {task!r}")
        names = [task.name for task in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"the same task is listed twice: {names}; give each task once")
        for task in self.tasks:  # a mixed task list is refused now, not after its generations
            if task.scoring == "loglikelihood":
                for stack in self.methods:
                    refuse_generation_hooks(stack, task.name)
        labels = self.labels
        if len(set(labels)) != len(labels):
            raise ValueError(f"the same method stack is listed twice: {labels}")
        if self.score == GOLD_LOGLIK:
            choice = [task.name for task in self.tasks if task.scoring == "loglikelihood"]
            if choice:
                raise ValueError(
                    f"--score gold_loglik applies to generation tasks; {choice} already score their options by "
                    "log-likelihood: evaluate them in a run without it"
                )

    @property
    def labels(self) -> list[str]:
        """Each method stack's label: the `method` of its records and its key in run.json and the summary."""
        return [stack.label for stack in self.methods]

    @property
    def prompt_format(self) -> PromptFormat:
        return PromptFormat(self.chat_template, self.system_prompt)

    def settings(self, task: Task) -> DecodeSettings:
        max_new, stops = task.generation_defaults()
        return DecodeSettings(
            max_new_tokens=self.max_new_tokens or max_new,
            stop_strings=stops,
            batch_size=self.batch_size,
            max_length=self.max_length,
            truncate=self.truncate,
        )

    def to_config(self) -> dict[str, Any]:
        """The run as a config file (OUT/config.yaml, `--print_config`): every option in field order, tasks and
        method stacks as class_path + init_args (every parameter: a replay pins the same); the short-form
        options are left out, since the tasks' init_args hold what they set."""
        config: dict[str, Any] = {}
        for item in option_fields(type(self)):
            if item.metadata.get("short_form"):
                continue
            value = getattr(self, item.name)
            if item.name == "tasks":
                value = [class_entry(task, task_params) for task in value]
            elif item.name == "methods":
                value = [_method_entry(stack) for stack in value]
            config[item.name] = value
        return config


def option_fields(cls: type[RunConfig]) -> list[Field]:
    """The fields of `cls` (`RunConfig` or a subclass) that are options of `evaluation run`, in their order."""
    return [item for item in fields(cls) if item.metadata.get("option", True)]


def _method_stack(entry: Any) -> MethodStack:
    """A `methods` entry as a stack: a spec string parsed, a method or a list of methods stacked."""
    if isinstance(entry, str):
        return MethodStack.parse(entry)
    if isinstance(entry, Method):
        return MethodStack([entry])
    if isinstance(entry, list):
        return MethodStack(entry)
    if not isinstance(entry, MethodStack):
        raise TypeError(f"RunConfig.methods: expected MethodStack objects (or spec strings), got {entry!r}")
    return entry


def _method_entry(stack: MethodStack) -> Any:
    """A stack as a config's `methods` entry: its label when empty, one class entry, or a list of them."""
    entries = [class_entry(method, Method.params) for method in stack.methods]
    return stack.label if not entries else entries[0] if len(entries) == 1 else entries


def _gold_positions(value: str | list[int]) -> str | list[int]:
    refuse_renamed_grid(value)
    if not isinstance(value, str) or value in GRID_NAMES:
        return value
    try:
        return [int(x) for x in value.split(",")]
    except ValueError:
        raise ValueError(
            f"argument --gold_positions: expected one of {list(GRID_NAMES)} or comma-separated 0-based ints, "
            f"got {value!r}"
        ) from None


def short_form_tasks(config: Any) -> list[Task]:
    """`tasks: a,b` with the short-form options: each task built, its data file found in `data_dir`. `config` is
    a `RunConfig` or the parsed options of `evaluation run` (the same names).

    An option the user did not set (None) leaves the task's own default, and gives a task that declares none
    (`declared_default`) the command's (`COMMAND_DEFAULTS`); without a model the tiny sizes (`TINY_DEFAULTS`)
    apply to every task that takes them."""
    names = list(dict.fromkeys(name.strip() for name in config.tasks.split(",") if name.strip()))  # once each
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ValueError(f"unknown task(s) {unknown or [config.tasks]}; choose from {sorted(TASKS)}")
    extra: dict[str, dict[str, Any]] = {}
    for item in config.task_param:
        task, _, assignment = item.partition(":")
        key, eq, value = assignment.partition("=")
        if task not in names or not eq or not key:
            raise ValueError(f"bad --task_param {item!r}: write TASK:key=value with TASK one of {names}")
        extra.setdefault(task, {})[key] = parse_value(value)
    # each short-form option (and the seed) sets the task parameter of its name; None: not set by the user
    given = {
        item.name: getattr(config, item.name)
        for item in option_fields(RunConfig)
        if item.metadata.get("short_form") and item.name != "task_param"
    }
    if given["gold_positions"] is not None:
        given["gold_positions"] = _gold_positions(given["gold_positions"])
    if config.model is None:  # the tiny model's sizes, whatever the task's own
        given = {key: TINY_DEFAULTS.get(key) if value is None else value for key, value in given.items()}
    tasks = []
    for name in names:
        cls = TASKS[name]
        params = {"seed": config.seed} if "seed" in cls.field_names() else {}
        for key, value in given.items():
            if key not in cls.field_names():  # common options only go to tasks that take them
                continue
            if value is None and declared_default(cls, key) is None:
                value = COMMAND_DEFAULTS.get(key)  # the command's default where the task has none of its own
            if value is not None:
                params[key] = value
        params.update(extra.get(name, {}))  # --task_param as given: a typo fails in build_task
        params = with_data_file(name, params, config.data_dir)
        if name == "kv" and params.get("path") is None and params.get("num_examples") is None:
            raise ValueError("kv without a data file generates its examples: pass --num_examples N")
        tasks.append(build_task(name, **params))
    return tasks


def declared_default(cls: type[Task], name: str) -> Any:
    """The default task class `cls` declares for its parameter `name`, or None where it declares none (no default,
    or None: a value the task itself asks for, as kv's `num_keys` when it generates)."""
    for item in fields(cls):
        if item.name == name and item.default is not MISSING:
            return item.default
        if item.name == name and item.default_factory is not MISSING:
            return item.default_factory()
    return None


def with_data_file(name: str, params: dict[str, Any], data_dir: str | Path | None) -> dict[str, Any]:
    """`params` with `path` set to the task's file in `data_dir` when the task reads one and none is given."""
    if data_dir is None or params.get("path") is not None or TASKS[name].data_file_pattern is None:
        return params
    found = TASKS[name].find_data_file(data_dir, params)
    return {**params, "path": str(found)} if found is not None else params


def task_params(task: Task) -> dict[str, Any]:
    """A task's configuration as `build_task` parameters: every field set (not None), except a tokenizer (the
    evaluated model's, injected by `prepare`). What run.json pins and config.yaml stores for it."""
    return {
        f.name: getattr(task, f.name)
        for f in fields(task)
        if f.init and f.name != "tokenizer" and getattr(task, f.name) is not None
    }


def check_tiny_default_options(dtype: str, attn_implementation: str, prefix: str = "--") -> None:
    """The tiny default is built in float32 with SDPA: another dtype or attention for it is refused, not ignored
    (a config would record it as used). `prefix` spells the options as the command does ("--", "--model.")."""
    given = [f"{prefix}{name} {value}" for name, value, default in (("dtype", dtype, ("auto", "float32")),
             ("attn_implementation", attn_implementation, ("sdpa",))) if value not in default]  # fmt: skip
    if given:
        raise ValueError(
            f"{', '.join(given)} applies to a model loaded from a directory, and none is given (the built-in tiny "
            "default runs in float32 with sdpa): pass --model DIR, or leave the option out"
        )
