"""Which harness task a search scores: mdqa, kv, or any other `Task` (a user's own included), by name or class_path.

`task.name` in a search config is a name in the harness's registry (`evaluation.tasks.TASKS`: the project's
tasks and those a module named with `--import` registered) or the class_path of a `Task` subclass. A
class_path is resolved only in the project's packages or a module already imported (by `--import`, or by the
caller of the Python API), so naming one never runs new code. The fitness needs from the task: k, the items
per prompt (mdqa's `num_documents`, kv's `num_keys`, any other task's `num_items`), and `gold_positions`, which
it sets to begin, middle and end.
"""

from __future__ import annotations

import dataclasses
import sys

from evaluation.sample_data import check_data_dir
from evaluation.tasks import TASKS, Task, task_name_of
from repo_common.user_code import resolve_class

#: The task parameter holding k, per built-in search task; any other task's is `num_items`.
ITEM_PARAMETER = {"mdqa": "num_documents", "kv": "num_keys"}
#: What the search sets in the task's parameters itself (a config's `task.params` may not).
SET_BY_THE_SEARCH = ("gold_positions", "num_examples", "seed", "example_offset")


def task_class(name: str) -> type[Task]:
    """The `Task` subclass `name` stands for: a registered name, or a class_path (a ValueError of one line if not)."""
    if name in TASKS:
        return TASKS[name]
    if "." in name.strip("."):
        module = name.rpartition(".")[0]
        imported = [module] if module in sys.modules else []  # named by --import (or imported by the caller)
        return resolve_class(name, Task, imported, "task.name")
    raise ValueError(
        f"task.name {name!r} is not a registered task; choose from {sorted(TASKS)}, or name your own Task subclass "
        "(--import MODULE, then its name or class_path; docs/configuring.md)"
    )


def task_name(name: str) -> str:
    """The registry name of the search's task (a class named by its class_path is registered on first use)."""
    return task_name_of(task_class(name))


def item_parameter(name: str) -> str:
    """The parameter of task `name` that holds k, checked to exist with `gold_positions` beside it."""
    cls = task_class(name)
    key = ITEM_PARAMETER.get(task_name(name), "num_items")
    fields = {f.name for f in dataclasses.fields(cls)}
    missing = [field for field in (key, "gold_positions") if field not in fields]
    if missing:
        raise ValueError(
            f"task {name!r} has no {' or '.join(missing)} parameter: the search needs a task whose k items per prompt "
            "are `num_items` and whose relevant item moves with `gold_positions` (see examples/extension/colour_task.py)"
        )
    return key


def task_data_file(task) -> str | None:
    """The data file the search task `task` (a `TaskConfig`) reads from its `data_dir`, found as the harness finds
    it (`Task.find_data_file`); None without a data dir (mdqa then reads the packaged sample, kv generates).

    Torch-free, so `search run` calls it before loading the model: a missing folder or file is refused at once,
    in one line naming what to download.
    """
    if task.data_dir is None:
        return None
    check_data_dir("--task.data_dir", task.data_dir)
    name = task_name(task.name)
    cls = TASKS[name]
    if name not in ITEM_PARAMETER and cls.data_file_pattern is None:
        raise ValueError(f"task.data_dir: task {name!r} reads no data file from a folder; drop task.data_dir")
    params = {item_parameter(name): task.num_items}
    return str(cls.find_data_file(task.data_dir, params if name in ITEM_PARAMETER else {**task.params, **params}))
