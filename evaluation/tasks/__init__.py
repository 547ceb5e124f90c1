"""Evaluation tasks: the `Task` contract (`base`), one module per task, and their registry (`registry`: `TASKS`,
`register_task`, `build_task`, `task_name_of`). This package only re-exports them."""

from __future__ import annotations

from evaluation.tasks.babi import BabiTask
from evaluation.tasks.base import GRID_HELP, GRID_NAMES, Task, refuse_renamed_grid, resolve_gold_positions
from evaluation.tasks.kv_retrieval import KVRetrievalTask
from evaluation.tasks.longbench import LongBenchTask
from evaluation.tasks.mdqa import MDQAReleaseTask, MDQATask
from evaluation.tasks.multiple_choice import MultipleChoiceTask
from evaluation.tasks.registry import TASKS, build_task, register_task, task_name_of
from evaluation.tasks.reversal import ReversalTask
from evaluation.tasks.ruler import (
    RulerMultiKeyTask,
    RulerMultiQueryTask,
    RulerMultiValueTask,
    RulerNIAHTask,
    RulerVariableTrackingTask,
)
from evaluation.tasks.scrolls import ScrollsTask

__all__ = [
    "GRID_HELP",
    "GRID_NAMES",
    "TASKS",
    "BabiTask",
    "KVRetrievalTask",
    "LongBenchTask",
    "MDQAReleaseTask",
    "MDQATask",
    "MultipleChoiceTask",
    "ReversalTask",
    "RulerMultiKeyTask",
    "RulerMultiQueryTask",
    "RulerMultiValueTask",
    "RulerNIAHTask",
    "RulerVariableTrackingTask",
    "ScrollsTask",
    "Task",
    "build_task",
    "refuse_renamed_grid",
    "register_task",
    "resolve_gold_positions",
    "task_name_of",
]
