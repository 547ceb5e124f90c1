"""What a search needs from its config before the GA starts: the task's build parameters, decoding, the model.

Shared by `python -m search run` and `search diagnose` (search/structure.py),
so the structure diagnosis scores exactly the prompts the search scored.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from evaluation.methods.decoding import DecodeSettings
from evaluation.model_identity import model_identity
from evaluation.model_loading import load_model, place_model, tiny_default, weights_identity
from evaluation.run_config import check_tiny_default_options
from evaluation.runner import task_generation
from evaluation.sample_data import NQ_OPEN_ORACLE
from search.harness_fitness import HarnessFitness
from search.search_task import item_parameter, task_data_file, task_name


def task_parameters(task) -> dict[str, Any]:
    """`build_task` parameters of the search task (data file, k, `task.params`); gold positions etc. are the
    fitness's.

    The data file comes from the evaluation task's own lookup (`search_task.task_data_file`): mdqa's
    nq-open-oracle file (without a data dir, the packaged sample), kv's kv-retrieval-<k>_keys file (without a
    data dir, kv generates its examples), another task's `data_file_pattern`; another task's k is its
    `num_items`, beside its own `task.params`.
    """
    path = task_data_file(task)  # a missing folder or file: one line naming what to download
    name = task_name(task.name)
    if name not in ("mdqa", "kv"):
        return {**task.params, item_parameter(name): task.num_items, **({"path": path} if path else {})}
    if name == "mdqa":
        params: dict[str, Any] = {"num_documents": task.num_items}
        if path is None:
            print(
                f"mdqa without a data dir: the packaged 40-question sample {NQ_OPEN_ORACLE.name} (a smoke test)",
                file=sys.stderr,
            )
        return {"path": path or str(NQ_OPEN_ORACLE), **params, **task.params}
    params = {"path": path, "num_keys": task.num_items}
    if task.key_chars is not None:
        if path is not None:
            raise ValueError("task.key_chars shortens generated keys; it cannot apply to a release file")
        params["key_chars"] = task.key_chars
    if task.template != "json":
        params["template"] = task.template  # checked by the kv task (pairs needs key_chars)
    if task.distinct_keys is not None:
        params["distinct_keys"] = task.distinct_keys  # checked by the kv task (pairs only)
    return {**params, **task.params}


def decode_settings(task) -> Any:
    """`DecodeSettings` of a search task: the config's budget and batch, the harness task's stop strings."""
    _, stops = task_generation(task_name(task.name), {**task_parameters(task), "num_examples": 1})
    return DecodeSettings(
        max_new_tokens=task.max_new_tokens,
        stop_strings=stops,
        batch_size=task.batch_size,
        max_length=task.max_length,
        truncate=task.truncate,
    )


def search_fitness(task, model, tokenizer, fitness_cls=None, **options):
    """The fitness over a config task's search set: its questions, seed, decoding and prompt format.

    One builder, so `search run` and `search diagnose` score the same prompts; `options` add what only
    a run needs (subset weights, progress, the score). `fitness_cls` replaces `HarnessFitness` in tests.
    """
    return (fitness_cls or HarnessFitness)(
        model,
        tokenizer,
        task.name,
        task_parameters(task),
        num_examples=task.num_examples,
        seed=task.seed,
        settings=decode_settings(task),
        prompt_format=task.prompt_format,
        **options,
    )


def load_search_model(model_config):
    """Model and tokenizer on the right device: a local directory, or the tiny default."""
    if model_config.path is None:
        check_tiny_default_options(model_config.dtype, model_config.attn_implementation, "--model.")
        model, tokenizer = tiny_default(model_config.seed)
    else:
        model, tokenizer = load_model(Path(model_config.path), model_config.dtype, model_config.attn_implementation)
    return place_model(model, model_config.device), tokenizer


def searched_model(model_config, model) -> dict[str, Any]:
    """What a scale file records of the model it was searched for, and evaluation checks before applying it
    (`evaluation.scale_file_model`): the dtype- and path-independent config hash and the weight files (or the
    tiny default's seed)."""
    path = model_config.path
    files = weights_identity(Path(path).resolve()) if path else {"tiny_default_seed": model_config.seed}
    return {"identity_sha256": model_identity(model)["config_sha256"], "weight_files": files}
