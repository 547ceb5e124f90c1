"""The configuration of `python -m evaluation run`: the fields of `RunConfig`, parsed by jsonargparse.

Each field of `evaluation.run_config.RunConfig` is an option (its docstring is the help) and a key of a run
file, so a new option is one field there. A run file names its tasks and methods as classes, the way
LightningCLI names models (docs/configuring.md):

    model: outputs/quickstart/models/rope
    out: results/rope
    tasks:
      - class_path: evaluation.tasks.KVRetrievalTask
        init_args: {num_keys: 16, num_examples: 50, gold_positions: all}
    methods:
      - baseline                              # the short form, as on the command line
      - class_path: evaluation.methods.PositionInterpolation
        init_args: {scale: 2.0}
      - [pi:scale=2, caliope:calibrator=hourglass]   # a stack

The command line keeps its short forms, which parse into the same objects:
`--tasks mdqa,kv` with `--num_documents/--num_keys/--num_examples/
--gold_positions/--task_param TASK:key=value`, and `--methods NAME:k=v+NAME2`
(`--methods` and `--task_param` are repeatable, one item each time).
`resolve` turns the parsed options into the `RunConfig` and the *resolved*
configuration (`RunConfig.to_config`: every task and method as `class_path` +
`init_args`, data files found, defaults filled in), which the run stores as
`OUT/config.yaml` and `--print_config` prints.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from typing import Any

from jsonargparse import Namespace, set_parsing_settings

from evaluation.methods import METHODS, Method, MethodStack, configure_method, register_method
from evaluation.run_config import TINY_DEFAULTS, RunConfig, option_fields, short_form_tasks, with_data_file
from evaluation.sample_data import NQ_OPEN_ORACLE, check_data_dir
from evaluation.tasks import GRID_HELP, GRID_NAMES, TASKS, Task, build_task, task_name_of
from repo_common import user_code
from repo_common.config_cli import ConfigParser
from repo_common.file_permissions import check_folder_listable
from repo_common.model_directory import check_model_files
from repo_common.registry import Registry
from repo_common.user_code import resolve_class

#: The list options that take one item per occurrence (`--methods baseline --methods pi:scale=2`).
REPEATABLE = ("methods", "task_param")
#: Spellings of earlier versions and the option to write instead.
SPELLING_HINTS = {"--method": "--methods"}

_TASK_LINES = textwrap.fill(
    f"tasks (short form, --tasks a,b): {', '.join(sorted(TASKS))}", width=104, subsequent_indent="  "
)
_METHOD_LINES = "\n".join(f"  {name:18s} {METHODS.class_path(name)}" for name in sorted(METHODS))

EPILOG = f"""\
config: every option is also a key of a YAML file (--config run.yaml; underscores, e.g. batch_size);
  --print_config prints the resolved configuration, which each run also stores as OUT/config.yaml, so
  --config OUT/config.yaml replays it. Tasks and methods may be classes there (class_path + init_args);
  see docs/configuring.md. An option is spelt as its key (--batch_size); a true/false option given alone
  means true; --methods and --task_param are repeatable.

{_TASK_LINES}
gold positions (short-form tasks): {" | ".join(GRID_NAMES)} or comma-separated 0-based ints
  ({GRID_HELP})

data (short-form tasks):
  mdqa   reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release). Without --data_dir it
         uses the 40-question sample shipped with the package, {NQ_OPEN_ORACLE.name} in
         evaluation/data/lost_in_the_middle (a smoke test, not a benchmark; that folder works as --data_dir too).
  kv     reads DATA_DIR/kv-retrieval-<num_keys>_keys.jsonl(.gz) (an error if --data_dir lacks it); without
         --data_dir generates --num_examples examples of --num_keys random UUID pairs from --seed.
  other task parameters: --task_param TASK:key=value (e.g. mdqa_release:path=FILE).

methods: NAME or NAME:key=value,...; stack with '+' (a+b:k=v); in a config also class_path + init_args
  (--methods.help NAME shows its parameters; a config may give the full class path):
{_METHOD_LINES}

without --model: a random tiny OLMo-2 with a byte tokenizer (answers are noise) and small
defaults {TINY_DEFAULTS}.

exit codes: 0 done, 2 usage error, 3 stopped early by --max_records (rerun to resume).
"""


def _named_class_path(registry: Registry):
    """For `--methods.help NAME`: a registered name's class path, None for a dotted class path (jsonargparse's
    own), a one-line ValueError for anything else."""

    def resolve(name: str) -> str | None:
        if "." in name and name not in registry:
            return None
        try:
            return registry.class_path(registry.check_name(name))
        except ValueError as err:
            raise ValueError(f"{err}, or give a class path") from None

    return resolve


def add_run_options(parser: ConfigParser) -> None:
    """The options of `evaluation run`: `--import`, then every option field of `RunConfig`, typed by it, its
    docstring the help (each also a key of a config file)."""
    set_parsing_settings(subclasses_enabled=[Task, Method])  # class_path may name any Task / Method subclass
    parser.add_import_option()
    parser.class_path_loaders.append(METHODS.load_class_named)  # `class_path: PositionInterpolation` in a config
    parser.help_names["methods"] = _named_class_path(METHODS)
    parser.help_names["tasks"] = _named_class_path(TASKS)
    options = {item.name: item for item in option_fields(RunConfig)}
    python_only = {item.name for item in dataclasses.fields(RunConfig)} - set(options)
    # a field's docstring is its option's help: read only here, since it makes every later parser slower
    # (LightningCLI's by seconds); jsonargparse's default is off
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    try:
        parser.add_class_arguments(RunConfig, as_group=False, fail_untyped=True, skip=python_only)
    finally:
        set_parsing_settings(docstring_parse_attribute_docstrings=False)
    for action in parser._actions:
        if action.dest in options and options[action.dest].type in (bool, "bool"):  # `--no_report` alone: true
            action.nargs, action.const = "?", True
    parser.epilog = EPILOG
    parser.repeatable = REPEATABLE
    parser.spelling_hints = dict(SPELLING_HINTS)


@dataclasses.dataclass
class ResolvedRun:
    """What `resolve` makes of the options: the runner's config and the configuration to store."""

    run: RunConfig
    """The runner's input (`EvalConfig`): tasks and method stacks as configured objects."""
    config: dict[str, Any]
    """The resolved configuration (`OUT/config.yaml`): the `RunConfig`, with the user's modules first."""


def _method_class(cls: type[Method]) -> type[Method]:
    """A method class named by its class_path, registered on first use (so a report can describe its label)."""
    return cls if METHODS.get(cls.name) is cls else register_method(cls)


def _class_tasks(entries: Sequence[Namespace], data_dir: str | None, user_modules: Sequence[str] = ()) -> list[Task]:
    """Typed task entries (class_path + init_args) as tasks, data files found."""
    tasks: dict[str, Task] = {}
    for entry in entries:
        name = task_name_of(resolve_class(entry.class_path, Task, user_modules, "task class_path"))
        if name in tasks:
            raise ValueError(f"task {name!r} is listed twice; give each task once")
        params = {k: v for k, v in dict(entry.init_args or {}).items() if v is not None}
        tasks[name] = build_task(name, **with_data_file(name, params, data_dir))  # a bad parameter fails here
    return list(tasks.values())


def _method_stack(entry: Any, user_modules: Sequence[str] = ()) -> MethodStack | str:
    """A `methods` entry of class entries as a stack, built once (a spec string is `RunConfig`'s to parse)."""
    if isinstance(entry, str):
        return entry
    items = entry if isinstance(entry, list) else [entry]
    methods = []
    for item in items:
        cls = _method_class(resolve_class(item.class_path, Method, user_modules, "method class_path"))
        methods.append(configure_method(cls, dict(item.init_args or {})))  # typed as a spec's values would be
    return MethodStack(methods)


def resolve(options: Namespace) -> ResolvedRun:
    """Turn parsed options into the `RunConfig`; every mistake is a ValueError/OSError naming the fix."""
    if options.model is not None:  # config.json and tokenizer files: a half-copied model is refused before torch
        check_model_files("--model", options.model)  # a hub id gets the download hint, a misspelt folder its sibling
    if options.data_dir is not None:
        check_data_dir("--data_dir", options.data_dir)  # names the release files to download
        check_folder_listable(options.data_dir)  # else its files "are not there"
    imports = list(options.get(user_code.KEY) or [])
    user_modules = [user_code.module_name_of(name) for name in imports]
    values = {item.name: options.get(item.name) for item in option_fields(RunConfig)}  # every option: one field each
    if isinstance(options.tasks, str) and options.tasks.lstrip().startswith(("[", "{")):
        raise ValueError(f"--tasks {options.tasks!r} is neither task names nor a list of task classes")
    if isinstance(options.tasks, str):  # before the methods: a refusal of a task loads no method's code
        values["tasks"] = short_form_tasks(options)
    else:
        values["tasks"] = _class_tasks(options.tasks, options.data_dir, user_modules)
    values["methods"] = [_method_stack(entry, user_modules) for entry in options.methods]
    if options.model is None and options.max_new_tokens is None:
        values["max_new_tokens"] = TINY_DEFAULTS["max_new_tokens"]
    run = RunConfig(**values)  # the objects themselves: the runner parses nothing again
    config = {**({user_code.KEY: imports} if imports else {}), **run.to_config()}  # a replay imports them first
    return ResolvedRun(run=run, config=config)
