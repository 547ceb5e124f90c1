"""Our side of the cross-check: the harness's baseline prompts of the task, and its own decode loop over their
batch plan (greedy continuations, or the gold answers' teacher-forced scores)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from evaluation.methods import MethodStack
from evaluation.methods.decoding import (
    DecodeSettings,
    ForcedScore,
    Generation,
    collate,
    generate_batch,
    score_continuations,
)
from evaluation.prompt_format import PromptFormat
from evaluation.runner import PreparedTask, gold_token_ids, prepare_task, task_generation

TASK = "mdqa"


def task_params(args: argparse.Namespace) -> dict[str, Any]:
    """`build_task('mdqa', ...)` parameters of the options."""
    return {
        "path": args.data,
        "num_documents": args.num_documents,
        "num_examples": args.num_examples,
        "gold_positions": args.gold_positions,
    }


def prepare(
    model,
    tokenizer,
    params: dict[str, Any],
    batch_size: int,
    max_new_tokens: int | None = None,
    chat_template: bool = False,
    system_prompt: str | None = None,
) -> PreparedTask:
    """The harness's baseline prompts of the task: rows, token ids, decode settings and batch plan."""
    default_new, stops = task_generation(TASK, params)
    settings = DecodeSettings(max_new_tokens=max_new_tokens or default_new, stop_strings=stops, batch_size=batch_size)
    return prepare_task(TASK, params, model, tokenizer, settings, PromptFormat(chat_template, system_prompt))


def prompt_texts(prepared: PreparedTask) -> tuple[list[str], bool]:
    """The exact strings the harness tokenised (chat-templated when that option is on), and whether it added the
    tokenizer's special tokens to them."""
    return list(prepared.texts), prepared.add_special_tokens


def length_budget(model, settings: DecodeSettings) -> int:
    """Prompt + new tokens, as the harness counts it (`prompt_limit`): --max_length, else max_position_embeddings."""
    return settings.max_length or int(model.config.max_position_embeddings)


def over_plan(model, tokenizer, prepared: PreparedTask, per_batch) -> tuple[float, list]:
    """Seconds and outputs (row order) of `per_batch(batch, indices, stack)` over the task's batch plan, as the
    harness runs it: the baseline stack attached, each batch collated with left padding."""
    stack = MethodStack.parse("baseline")
    outputs: list = [None] * len(prepared.prompts)
    start = time.perf_counter()
    with stack.attached(model, tokenizer):
        for indices in prepared.plan:
            batch = collate([prepared.prompts[i] for i in indices], tokenizer.pad_token_id, model.device)
            for index, output in zip(indices, per_batch(batch, indices, stack)):
                outputs[index] = output
    return time.perf_counter() - start, outputs


def run_ours(model, tokenizer, prepared: PreparedTask) -> tuple[float, list[Generation]]:
    """Seconds and the generations (row order) of the harness's loop over the task's batch plan, baseline stack."""
    return over_plan(
        model,
        tokenizer,
        prepared,
        lambda batch, _, stack: generate_batch(model, tokenizer, batch, prepared.settings, stack),
    )


def gold_texts(prepared: PreparedTask) -> list[str]:
    """Each row's gold continuation (`Task.gold_continuation`), the string both sides score."""
    return [prepared.task.gold_continuation(row["answers"], prepared.chat_template) for row in prepared.rows]


def run_ours_loglik(model, tokenizer, prepared: PreparedTask) -> tuple[float, list[ForcedScore]]:
    """Seconds and the gold answers' teacher-forced scores (row order) over the task's batch plan, baseline."""

    def score(batch, indices, stack):
        gold = [gold_token_ids(tokenizer, prepared, prepared.rows[i]) for i in indices]
        return score_continuations(model, tokenizer, batch, gold, stack)

    return over_plan(model, tokenizer, prepared, score)
