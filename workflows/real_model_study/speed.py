"""The study's speed probe: the baseline's prompts per second on a few evaluation prompts, and the time of
every step it projects from them (printed before the long steps start)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from evaluation.methods import MethodStack
from evaluation.methods.decoding import DecodeSettings
from evaluation.model_loading import load_model, place_model
from evaluation.prompt_format import PromptFormat
from evaluation.runner import prepare_task, run_stack
from workflows.real_model_study.data import DATA_NAME
from workflows.real_model_study.methods import BUCKET_RATIOS

#: The study's time budget on 2 CPU cores: the projection warns beyond it.
BUDGET_SECONDS = 3600


def load_study_model(model_dir: Path, args):
    """The model as the study's commands load it: the harness's loader, the study's dtype, device and threads."""
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(model_dir, args.dtype)
    return place_model(model, args.device), tokenizer


def measure_speed(model_dir: Path, data_dir: Path, size: Mapping[str, int], args) -> dict:
    """Baseline prompts per second on one batch of evaluation prompts (after a warm-up forward), in-process."""
    model, tokenizer = load_study_model(model_dir, args)
    params = {"path": str(data_dir / DATA_NAME), "num_documents": size["documents"], "num_examples": 2,
              "gold_positions": "all"}  # fmt: skip
    settings = DecodeSettings(max_new_tokens=size["max_new_tokens"], stop_strings=("\n",), batch_size=args.batch_size)
    prepared = prepare_task("mdqa", params, model, tokenizer, settings, PromptFormat(chat_template=True))
    prepared.plan, prepared.score = prepared.plan[:1], args.score
    with torch.no_grad():
        model(torch.tensor([prepared.prompts[0].input_ids[:32]], device=model.device))  # warm-up
    start = time.perf_counter()
    records = list(run_stack(model, tokenizer, prepared, MethodStack.parse("baseline"), progress="off"))
    seconds = time.perf_counter() - start
    tokens = [len(prepared.prompts[i].input_ids) for i in prepared.plan[0]]
    return {
        "prompts": len(records),
        "seconds": seconds,
        "prompts_per_second": len(records) / seconds,
        "mean_prompt_tokens": statistics.fmean(tokens),
        "threads": args.threads,
        "device": str(model.device),
        "dtype": args.dtype,
        "max_position_embeddings": int(model.config.max_position_embeddings),
        "rope_theta": float(model.config.rope_parameters["rope_theta"]),
        "score": args.score,
    }


def projected_seconds(size: Mapping[str, int], speed: Mapping[str, float]) -> dict[str, float]:
    """Seconds per step, from the measured prompts/s and each method's prefills per prompt."""
    k, rate = size["documents"], speed["prompts_per_second"]
    candidates = size["population"] + size["generations"] * max(1, size["population"] // 2)
    return {
        "search": (candidates * 3 * size["search_questions"] + 3 * 3 * size["held_out"]) / rate,
        "attention bias": 0.9 * k * size["bias_questions"] / rate,  # a prefill, no decoding
        # baseline, caliope, pi, ms_poe, string, lpes: 1 prefill each; pcd (scored by the metric only): 2
        "evaluation": (8 if speed.get("score", "metric") == "metric" else 6) * k * size["questions"] / rate,
        # baseline 1, fim K + 1, attention buckets 6
        "costly methods": (1 + (k + 1) + len(BUCKET_RATIOS)) * k * size["costly_questions"] / rate,
    }
