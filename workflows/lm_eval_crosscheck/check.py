"""The cross-check of checked options (`python -m workflows crosscheck-lm-eval`; `command` checks them first):
load the model once, run both harnesses on the same prompts, write the report."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

import torch

from evaluation.model_loading import load_model, place_model
from repo_common.atomic import write_json_atomic
from workflows.lm_eval_crosscheck.generations import crosscheck
from workflows.lm_eval_crosscheck.loglik import crosscheck_loglik
from workflows.lm_eval_crosscheck.names import COMMAND
from workflows.lm_eval_crosscheck.ours import TASK, length_budget, prepare, task_params


def environment(model) -> dict[str, Any]:
    """Threads, versions and the model call both sides make."""
    return {
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "device": str(model.device),
        "dtype": str(model.dtype).removeprefix("torch."),
        "attn_implementation": model.config._attn_implementation,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": importlib.metadata.version("transformers"),
            "lm_eval": importlib.metadata.version("lm_eval"),
        },
    }


def run_crosscheck(args: argparse.Namespace) -> dict[str, Any]:
    """Cross-check as the checked options `args` say; the report, also written to `args.out`."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not (Path(args.model) / "config.json").is_file():
        raise SystemExit(f"{COMMAND}: error: no model at {args.model}; make it with: python -m repo_train real-model")
    model, tokenizer = load_model(args.model, "float32", "sdpa")
    model = place_model(model, args.device)
    params = task_params(args)
    prepared = prepare(
        model, tokenizer, params, args.batch_size, args.max_new_tokens, args.chat_template, args.system_prompt
    )
    print(
        f"{len(prepared.rows)} MDQA prompts ({args.num_documents} documents), batch {args.batch_size}, "
        f"{prepared.settings.max_new_tokens} new tokens, stop {list(prepared.settings.stop_strings)}, "
        f"{torch.get_num_threads()} threads, {model.device}, {model.dtype}, {model.config._attn_implementation}"
    )
    check = crosscheck if args.score == "metric" else crosscheck_loglik
    report = check(model, tokenizer, prepared, args.repeats)
    settings = {
        "model": args.model,
        "task": TASK,
        "task_params": params,
        "max_new_tokens": prepared.settings.max_new_tokens,
        "stop_strings": list(prepared.settings.stop_strings),
        "batch_size": args.batch_size,
        "chat_template": args.chat_template,
        "system_prompt": args.system_prompt,
        "length_budget": length_budget(model, prepared.settings),
        "repeats": args.repeats,
        "score": args.score,
    }
    report = {"command": COMMAND, "settings": settings, "environment": environment(model), **report}
    path = write_json_atomic(args.out, report)
    print(f"wrote {path}")
    return report
