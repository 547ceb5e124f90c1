"""The positional attention bias as Found in the Middle measures it: the last prompt token's attention on the
gold document by its position, averaged over the heads of the later layers (one prefill per prompt)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from evaluation.attention_bias import attention_by_position, bias_curve
from evaluation.methods.decoding import DecodeSettings
from evaluation.prompt_format import PromptFormat
from evaluation.runner import prepare_task
from repo_common.atomic import write_json_atomic
from workflows.real_model_study.data import DATA_NAME
from workflows.real_model_study.speed import load_study_model


def measure_bias(model_dir: Path, data_dir: Path, size: Mapping[str, int], args, path: Path) -> dict:
    """Found in the Middle's attention-bias curve on the first evaluation questions (written to `path`)."""
    model, tokenizer = load_study_model(model_dir, args)
    params = {"path": str(data_dir / DATA_NAME), "num_documents": size["documents"],
              "num_examples": size["bias_questions"], "gold_positions": "all"}  # fmt: skip
    settings = DecodeSettings(max_new_tokens=size["max_new_tokens"], batch_size=args.batch_size)
    prepared = prepare_task("mdqa", params, model, tokenizer, settings, PromptFormat(chat_template=True))
    start = time.perf_counter()
    records, layers = attention_by_position(model, tokenizer, prepared, layers="last_half", progress=True)
    result = {
        "layers": layers,
        "questions": size["bias_questions"],
        "mean": bias_curve(records, "mean"),
        "mass": bias_curve(records, "mass"),
        "seconds": time.perf_counter() - start,
        "records": records,
    }
    write_json_atomic(path, result)
    return result
