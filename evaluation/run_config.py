"""What one evaluation run is: `RunConfig` (tasks and method stacks as objects), its decode settings, and the
checks of its options that need no model.

Plain Python, no torch or `datasets`: `evaluation run --print_config` resolves its options into a
`RunConfig` and prints it, and a refusal of an option comes, without loading the model code; the runner
(`evaluation.runner`), which needs torch, imports these names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from evaluation.methods import Baseline, MethodStack
from evaluation.prompt_format import PromptFormat
from evaluation.tasks import Task, build_task

#: Where a run may put a model it loads itself (`evaluation.model_loading.place_model`).
DEVICES = ("auto", "cpu", "cuda")
#: How a too-long prompt may be cut (`DecodeSettings.truncate`); None = refused.
TRUNCATION_POLICIES = ("left", "middle")
#: The score that teacher-forces each row's gold answer instead of generating (`RunConfig.score`).
GOLD_LOGLIK = "gold_loglik"
#: How a run scores a prompt of a generation task.
SCORES = ("metric", GOLD_LOGLIK)


def score_name(metric: str | None) -> str:
    """What a summary's per-method `accuracy` numbers are, for tables and axes: accuracy under a task's metric,
    or the gold answer's mean log-probability per token under `--score gold_loglik`."""
    return "gold log-likelihood" if metric == GOLD_LOGLIK else "accuracy"


@dataclass(frozen=True)
class DecodeSettings:
    """How to generate: greedy, up to `max_new_tokens`, stopping at EOS or a stop string."""

    max_new_tokens: int = 32
    """Most tokens generated per prompt."""
    stop_strings: tuple[str, ...] = ()
    """Generation of a row stops once its text contains one of these; the text is cut before it."""
    batch_size: int = 8
    """Prompts per forward (sorted by length, left-padded)."""
    max_length: int | None = None
    """Budget of prompt + new tokens; None = the model's max_position_embeddings."""
    truncate: str | None = None
    """None: a too-long prompt is an error; 'left' drops its start, 'middle' its middle."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.truncate is not None and self.truncate not in TRUNCATION_POLICIES:
            raise ValueError(f"truncate must be one of {list(TRUNCATION_POLICIES)} or None, got {self.truncate!r}")
        if isinstance(self.stop_strings, str):
            raise TypeError(f"stop_strings must be a tuple of strings, got the string {self.stop_strings!r}")


@dataclass
class RunConfig:
    """One evaluation run (`EvalConfig`): where, which model, which tasks and method stacks, as typed objects.

    `python -m evaluation run` builds it once from its options or YAML (`evaluation.config.resolve`) and the
    runner works on its objects. Python callers may write the short forms, parsed here once: `tasks` as
    `{name: build_task parameters}` and `methods` as spec strings ('baseline', 'pi:scale=2', 'a+b:k=v').
    """

    out: str
    """Output directory (records.jsonl, summary.json, run.json, plots, report.md)."""
    tasks: list[Task]
    """The tasks, each configured (`{name: params}` is built by `build_task`); one task per name."""
    methods: list[MethodStack] = field(default_factory=lambda: [MethodStack([Baseline()])])
    """Method stacks (a spec string is parsed by `MethodStack.parse`); each stack's `label` keys its records."""
    model: str | None = None
    """Local HF model directory; None = the built-in tiny default."""
    seed: int = 0
    """Seed of the tiny default's random weights."""
    batch_size: int = 8
    max_new_tokens: int | None = None
    """None = the task's default (`Task.generation_defaults`)."""
    max_length: int | None = None
    """Prompt + new tokens budget; None = the model's max_position_embeddings."""
    truncate: str | None = None
    """None (too long = error), 'left' or 'middle'."""
    dtype: str = "auto"
    """Weights' dtype of a model the run loads: auto = bfloat16 on a GPU, float32 on the CPU."""
    attn_implementation: str = "sdpa"
    device: str = "auto"
    """Where a model the run loads itself goes: auto (CUDA when present), cpu or cuda. Not a result setting."""
    bootstrap_resamples: int = 1000
    chat_template: bool = False
    """Wrap each task prompt in the tokenizer's chat template (lm-eval's --apply_chat_template)."""
    system_prompt: str | None = None
    """System message of the chat template (needs chat_template)."""
    allow_search_overlap: bool = False
    """Score a searched method on examples its search used (refused otherwise: `evaluation.search_overlap`)."""
    allow_other_model_scales: bool = False
    """Apply a scale file searched for another model (refused otherwise: `evaluation.scale_file_model`)."""
    score: str = "metric"
    """metric: the task's metric of each greedy answer; gold_loglik: the gold answer's mean log-probability per
    token, teacher-forced through each method stack (no generation: a continuous score with far more power on a
    weak model; this project's extension, as the search's `task.score`)."""

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {list(SCORES)}, got {self.score!r}")
        self.methods = [MethodStack.parse(m) if isinstance(m, str) else m for m in self.methods]  # a bad spec first
        if isinstance(self.tasks, Mapping):  # the short form: {name: build_task parameters}
            self.tasks = [build_task(name, **dict(params)) for name, params in self.tasks.items()]
        self.tasks = list(self.tasks)
        for task in self.tasks:
            if not isinstance(task, Task):
                raise TypeError(f"RunConfig.tasks: expected Task instances (or {{name: params}}), got {task!r}")
        names = [task.name for task in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"the same task is listed twice: {names}; give each task once")
        for stack in self.methods:
            if not isinstance(stack, MethodStack):
                raise TypeError(f"RunConfig.methods: expected MethodStack objects (or spec strings), got {stack!r}")
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
