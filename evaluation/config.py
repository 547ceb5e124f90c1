"""The configuration of `python -m evaluation run`: typed tasks and method stacks, parsed by jsonargparse.

A run file names its tasks and methods as classes, the way LightningCLI names
models (docs/configuring.md):

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
`--tasks mdqa,kv` with `--num-documents/--num-keys/--num-examples/
--gold-positions/--task-param TASK:key=value`, and `--method NAME:k=v+NAME2`
(repeatable). `resolve` turns the parsed options into the runner's
`RunConfig` and the *resolved* configuration (every task and method as
`class_path` + `init_args`, data files found, defaults filled in), which the
run stores as `OUT/config.yaml` and `--print_config` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from jsonargparse import Namespace, set_parsing_settings
from jsonargparse.typing import NonNegativeInt, PositiveInt

from evaluation.methods import METHODS, Method, MethodStack, configure_method, parse_value, register_method
from evaluation.prompt_format import PromptFormat
from evaluation.run_config import DEVICES, SCORES, RunConfig, task_params
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import GRID_HELP, GRID_NAMES, TASKS, Task, build_task, refuse_renamed_grid, register_task
from repo_common import user_code
from repo_common.config_cli import ConfigParser, Seed, class_entry
from repo_common.file_permissions import check_folder_listable
from repo_common.model_directory import check_model_directory
from repo_common.user_code import resolve_class

#: Defaults when no --model is given: the random tiny model only needs to run the pipeline, quickly.
TINY_DEFAULTS = dict(num_examples=2, num_documents=3, num_keys=4, max_new_tokens=8)
#: Defaults for real models (the Lost in the Middle settings).
MODEL_DEFAULTS = dict(num_documents=20, num_keys=75)
#: Old repeatable flags and the list option each fills.
REPEATED_FLAGS = {"--method": "methods", "--task-param": "task_param"}

_METHOD_LINES = "\n".join(f"  {name:18s} {METHODS.class_path(name)}" for name in sorted(METHODS))

EPILOG = f"""\
config: every option is also a key of a YAML file (--config run.yaml; underscores, e.g. batch_size);
  --print_config prints the resolved configuration, which each run also stores as OUT/config.yaml, so
  --config OUT/config.yaml replays it. Tasks and methods may be classes there (class_path + init_args);
  see docs/configuring.md.

data (short-form tasks):
  mdqa   reads DATA_DIR/nq-open-oracle*.jsonl(.gz) (Lost in the Middle release). Without --data-dir it
         uses the 40-question sample shipped with the package, {NQ_OPEN_ORACLE.name} in
         evaluation/data/lost_in_the_middle (a smoke test, not a benchmark; that folder works as --data-dir too).
  kv     reads DATA_DIR/kv-retrieval-<num_keys>_keys.jsonl(.gz) (an error if --data-dir lacks it); without
         --data-dir generates --num-examples examples of --num-keys random UUID pairs from --seed.
  other task parameters: --task-param TASK:key=value (e.g. mdqa_release:path=FILE).

methods: NAME or NAME:key=value,...; stack with '+' (a+b:k=v); in a config also class_path + init_args
  (the full class path: --methods.help CLASS_PATH shows a class's parameters):
{_METHOD_LINES}

without --model: a random tiny OLMo-2 with a byte tokenizer (answers are noise) and small
defaults {TINY_DEFAULTS}.

exit codes: 0 done, 2 usage error, 3 stopped early by --max-records (rerun to resume).
"""


def add_run_options(parser: ConfigParser) -> None:
    """The options of `evaluation run` (each also a key of a config file)."""
    set_parsing_settings(subclasses_enabled=[Task, Method])  # class_path may name any Task / Method subclass
    parser.add_import_option()
    parser.class_path_loaders.append(METHODS.load_class_named)  # `class_path: PositionInterpolation` in a config
    parser.add_argument("--model", type=str | None, help="local HF model directory (default: the tiny random model)")
    parser.add_argument("--out", type=str, required=True, help="output directory (resumes an earlier run's)")
    parser.add_argument(
        "--tasks",
        type=list[Task] | str,
        default="mdqa",
        help=f"task classes, or the short form: comma-separated names from {sorted(TASKS)}",
    )
    parser.add_argument(
        "--methods",
        type=list[str | Method | list[Method]],
        default=["baseline"],
        help="method stacks: specs (NAME[:k=v,...][+NAME2...]) or classes; --method SPEC (repeatable) "
        "replaces the list",
    )
    shortcut = "short-form tasks only"
    parser.add_argument(
        "--num_examples", "--num-examples", type=PositiveInt | None, help=f"source examples per task ({shortcut})"
    )
    parser.add_argument(
        "--example_offset",
        "--example-offset",
        type=NonNegativeInt | None,
        help=f"skip this many source examples first, e.g. the questions an LPES search used ({shortcut})",
    )
    parser.add_argument(
        "--num_documents", "--num-documents", type=PositiveInt | None, help=f"documents per MDQA prompt ({shortcut})"
    )
    parser.add_argument("--num_keys", "--num-keys", type=PositiveInt | None, help=f"KV pairs per prompt ({shortcut})")
    parser.add_argument(
        "--gold_positions",
        "--gold-positions",
        type=list[int] | str,
        default="ends-20-50-80",
        help=f"{'|'.join(GRID_NAMES)} or comma-separated 0-based ints ({GRID_HELP}) ({shortcut})",
    )
    parser.add_argument(
        "--task_param", type=list[str], default=[], help=f"TASK:key=value, also --task-param ({shortcut})"
    )
    parser.add_argument("--data_dir", "--data-dir", type=str | None, help="folder with the tasks' data files")
    parser.add_argument("--seed", type=Seed, default=0, help="seed of distractors / generated keys / tiny weights")
    parser.add_argument("--batch_size", "--batch-size", type=PositiveInt, default=8, help="prompts per forward")
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=PositiveInt | None, help="default: per task")
    parser.add_argument(
        "--max_length", "--max-length", type=PositiveInt | None, help="prompt + new tokens (default: model's)"
    )
    parser.add_argument(
        "--truncate", type=Literal["middle", "left"] | None, help="truncate too-long prompts (default: error)"
    )
    parser.add_argument(
        "--dtype",
        type=Literal["auto", "float32", "bfloat16", "float16"],
        default="auto",
        help="auto = bfloat16 on a GPU, float32 on the CPU (run.json records the one used)",
    )
    parser.add_argument(
        "--attn_implementation",
        "--attn-implementation",
        type=str,
        default="sdpa",
        help="sdpa, eager or flash_attention_2",
    )
    parser.add_argument(
        "--device", type=Literal[tuple(DEVICES)], default="auto", help="auto = cuda:LOCAL_RANK when CUDA is present"
    )
    parser.add_argument(
        "--max_records", "--max-records", type=PositiveInt | None, help="stop after N new records (rerun to resume)"
    )
    parser.add_argument(
        "--chat_template",
        "--chat-template",
        type=bool,
        default=False,
        help="wrap each prompt in the tokenizer's chat template (as lm-eval's --apply_chat_template)",
    )
    parser.add_argument(
        "--system_prompt", "--system-prompt", type=str | None, help="system message of the chat template"
    )
    parser.add_argument(
        "--score",
        type=Literal[SCORES],
        default="metric",
        help="metric: the task's metric of each greedy answer; gold_loglik: the gold answer's mean log-probability "
        "per token, teacher-forced through each method (no generation; more power on a weak model)",
    )
    parser.add_argument(
        "--allow_search_overlap",
        "--allow-search-overlap",
        action="store_true",
        help="score a searched method (lpes) on examples its search used; the report then says so",
    )
    parser.add_argument(
        "--allow_other_model_scales",
        "--allow-other-model-scales",
        action="store_true",
        help="apply an lpes scale file searched for another model (refused otherwise; the run then says so)",
    )
    parser.add_argument("--no_progress", "--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--no_report", "--no-report", action="store_true", help="skip plots and report.md")


@dataclasses.dataclass
class ResolvedRun:
    """What `resolve` makes of the options: the runner's config and the configuration to store."""

    run: RunConfig
    """The runner's input (`EvalConfig`): tasks and method stacks as configured objects."""
    config: dict[str, Any]
    """The resolved configuration (`OUT/config.yaml`)."""


def task_name_of(cls: type[Task]) -> str:
    """The registry name of a task class; a class named by its class_path is registered on first use."""
    for name, registered in TASKS.items():
        if registered is cls:
            return name
    return register_task(cls).name


def _method_class(cls: type[Method]) -> type[Method]:
    """A method class named by its class_path, registered on first use (so a report can describe its label)."""
    return cls if METHODS.get(cls.name) is cls else register_method(cls)


def _gold_positions(value: str | list[int]) -> str | list[int]:
    refuse_renamed_grid(value)
    if not isinstance(value, str) or value in GRID_NAMES:
        return value
    try:
        return [int(x) for x in value.split(",")]
    except ValueError:
        raise ValueError(
            f"argument --gold-positions: expected one of {list(GRID_NAMES)} or comma-separated 0-based ints, "
            f"got {value!r}"
        ) from None


def _short_form_tasks(options: Namespace) -> dict[str, dict[str, Any]]:
    """`--tasks a,b` with the shortcut options: each task's `build_task` parameters, data files found."""
    names = [name.strip() for name in options.tasks.split(",") if name.strip()]
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ValueError(f"unknown task(s) {unknown or [options.tasks]}; choose from {sorted(TASKS)}")
    defaults = TINY_DEFAULTS if options.model is None else MODEL_DEFAULTS
    extra: dict[str, dict[str, Any]] = {}
    for item in options.task_param:
        task, _, assignment = item.partition(":")
        key, eq, value = assignment.partition("=")
        if task not in names or not eq or not key:
            raise ValueError(f"bad --task-param {item!r}: write TASK:key=value with TASK one of {names}")
        extra.setdefault(task, {})[key] = parse_value(value)
    num_examples = options.num_examples or defaults.get("num_examples")
    common = {
        "seed": options.seed,
        "gold_positions": _gold_positions(options.gold_positions),
        "num_examples": num_examples,
        "example_offset": options.example_offset,
        "num_documents": options.num_documents or defaults["num_documents"],
        "num_keys": options.num_keys or defaults["num_keys"],
    }
    tasks: dict[str, dict[str, Any]] = {}
    for name in names:
        fields = set(TASKS[name].field_names())  # common options only go to tasks that take them
        params = {k: v for k, v in common.items() if k in fields and v is not None}
        params.update(extra.get(name, {}))  # --task-param as given: a typo fails in build_task
        tasks[name] = _with_data_file(name, params, options.data_dir)
        if name == "kv" and tasks[name].get("path") is None and num_examples is None:
            raise ValueError("kv without a data file generates its examples: pass --num-examples N")
    return tasks


def _with_data_file(name: str, params: dict[str, Any], data_dir: str | None) -> dict[str, Any]:
    """`params` with `path` set to the task's file in `data_dir` when the task reads one and none is given."""
    if data_dir is None or params.get("path") is not None or TASKS[name].data_file_pattern is None:
        return params
    found = TASKS[name].find_data_file(data_dir, params)
    return {**params, "path": str(found)} if found is not None else params


def _class_tasks(
    entries: Sequence[Namespace], data_dir: str | None, user_modules: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """Typed task entries (class_path + init_args) as `build_task` parameters, data files found."""
    tasks: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = task_name_of(resolve_class(entry.class_path, Task, user_modules, "task class_path"))
        if name in tasks:
            raise ValueError(f"task {name!r} is listed twice; give each task once")
        params = {k: v for k, v in dict(entry.init_args or {}).items() if v is not None}
        tasks[name] = _with_data_file(name, params, data_dir)
    return tasks


def _method_stack(entry: Any, user_modules: Sequence[str] = ()) -> MethodStack:
    """A `methods` entry (a spec string, a class entry, or a list of class entries) as a stack, built once."""
    if isinstance(entry, str):  # the short form, parsed here and nowhere after
        return MethodStack.parse(entry)
    items = entry if isinstance(entry, list) else [entry]
    methods = []
    for item in items:
        cls = _method_class(resolve_class(item.class_path, Method, user_modules, "method class_path"))
        methods.append(configure_method(cls, dict(item.init_args or {})))  # typed as a spec's values would be
    return MethodStack(methods)


def _method_entry(stack: MethodStack) -> Any:
    entries = [class_entry(method, Method.params) for method in stack.methods]
    return stack.label if not entries else entries[0] if len(entries) == 1 else entries


def resolve(options: Namespace) -> ResolvedRun:
    """Turn parsed options into the runner's inputs; every mistake is a ValueError/OSError naming the fix."""
    if options.model is not None:
        check_model_directory("--model", options.model)  # a hub id gets the download hint
    if options.data_dir is not None and not Path(options.data_dir).is_dir():
        raise FileNotFoundError(f"--data-dir {str(options.data_dir)!r} is not a directory")
    if options.data_dir is not None:
        check_folder_listable(options.data_dir)  # else its files "are not there"
    imports = list(options.get(user_code.KEY) or [])
    user_modules = [user_code.module_name_of(name) for name in imports]
    if isinstance(options.tasks, str):
        if options.tasks.lstrip().startswith(("[", "{")):
            raise ValueError(f"--tasks {options.tasks!r} is neither task names nor a list of task classes")
        tasks = _short_form_tasks(options)
    else:
        tasks = _class_tasks(options.tasks, options.data_dir, user_modules)
    built = [build_task(name, **params) for name, params in tasks.items()]  # a bad parameter fails here
    stacks = [_method_stack(entry, user_modules) for entry in options.methods]
    max_new = options.max_new_tokens or (TINY_DEFAULTS["max_new_tokens"] if options.model is None else None)
    config = {
        **({user_code.KEY: imports} if imports else {}),  # the user's modules, so a replay imports them first
        "model": options.model,
        "out": options.out,
        "tasks": [class_entry(task, task_params) for task in built],  # every field: a replay pins the same
        "methods": [_method_entry(stack) for stack in stacks],
        "data_dir": options.data_dir,
        "seed": options.seed,
        "batch_size": options.batch_size,
        "max_new_tokens": max_new,
        "max_length": options.max_length,
        "truncate": options.truncate,
        "dtype": options.dtype,
        "attn_implementation": options.attn_implementation,
        "device": options.device,
        "chat_template": options.chat_template,
        "system_prompt": options.system_prompt,
        "score": options.score,
        "allow_search_overlap": options.allow_search_overlap,
        "allow_other_model_scales": options.allow_other_model_scales,
        "max_records": options.max_records,
        "no_progress": options.no_progress,
        "no_report": options.no_report,
    }
    run = RunConfig(  # the objects themselves: the runner parses nothing again
        out=options.out,
        tasks=built,
        methods=stacks,
        model=options.model,
        seed=options.seed,
        batch_size=options.batch_size,
        max_new_tokens=max_new,
        max_length=options.max_length,
        truncate=options.truncate,
        dtype=options.dtype,
        attn_implementation=options.attn_implementation,
        device=options.device,
        chat_template=options.chat_template,
        system_prompt=options.system_prompt,
        score=options.score,
        allow_search_overlap=options.allow_search_overlap,
        allow_other_model_scales=options.allow_other_model_scales,
    )
    PromptFormat(options.chat_template, options.system_prompt)  # a system prompt without the template fails here
    return ResolvedRun(run=run, config=config)
