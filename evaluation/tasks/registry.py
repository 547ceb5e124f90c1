"""Registry of evaluation tasks: a config or CLI names a task and its parameters, `build_task` makes it.

`build_task` returns the configured `Task` (call `.build()` for its dataset and
`.score()` for its metric) and turns typos into errors that list what is valid,
instead of a dataclass `TypeError`. `task_name_of` gives a task class's registry
name, registering a class that a config names by class_path on first use (the
harness's `evaluation run` and the search's `task.name` share it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from evaluation.tasks.babi import BabiTask
from evaluation.tasks.base import Task
from evaluation.tasks.kv_retrieval import KVRetrievalTask
from evaluation.tasks.longbench import LongBenchTask
from evaluation.tasks.mdqa import MDQAReleaseTask, MDQATask
from evaluation.tasks.multiple_choice import MultipleChoiceTask
from evaluation.tasks.reversal import ReversalTask
from evaluation.tasks.ruler import (
    RulerMultiKeyTask,
    RulerMultiQueryTask,
    RulerMultiValueTask,
    RulerNIAHTask,
    RulerVariableTrackingTask,
)
from evaluation.tasks.scrolls import ScrollsTask
from repo_common.registry import Registry

#: Every task by its name (`--tasks NAME`, `build_task`); `register_task` adds a user's.
TASKS: Registry[type[Task]] = Registry(
    "task",
    {
        "mdqa": MDQATask,
        "mdqa_release": MDQAReleaseTask,
        "kv": KVRetrievalTask,
        "ruler_niah_single": RulerNIAHTask,
        "ruler_niah_multikey": RulerMultiKeyTask,
        "ruler_niah_multivalue": RulerMultiValueTask,
        "ruler_niah_multiquery": RulerMultiQueryTask,
        "ruler_vt": RulerVariableTrackingTask,
        "babi_qa2": BabiTask,
        "reversal": ReversalTask,
        "longbench": LongBenchTask,
        "scrolls": ScrollsTask,
        "multiple_choice": MultipleChoiceTask,
    },
)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a `Task` dataclass buildable by its `name` (`--tasks NAME`, `build_task`)."""
    if not (isinstance(cls, type) and issubclass(cls, Task) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} must be a dataclass subclass of evaluation.tasks.Task")
    return TASKS.register(cls)


def task_name_of(cls: type[Task]) -> str:
    """The registry name of a task class; a class named by its class_path is registered on first use."""
    return TASKS.name_of(cls) or register_task(cls).name


def build_task(name: str, **params: Any) -> Task:
    """The task registered as `name`, configured with `params` (its dataclass fields)."""
    cls = TASKS.lookup(name)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for task {name!r}; valid parameters are {sorted(fields)}")
    missing = sorted(
        f.name
        for f in fields.values()
        if f.name not in params and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ValueError(f"task {name!r} needs parameter(s) {missing}")
    return cls(**params)
