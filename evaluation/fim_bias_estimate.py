"""`python -m evaluation calibrate-fim`'s work (evaluation.fim_calibration: its options): the model loaded, the
calibration prompts built as `python -m evaluation run` builds them, the bias estimated and written."""

from __future__ import annotations

import argparse
import time

import torch

from evaluation.fim_calibration import calibration_params
from evaluation.methods import build_method
from evaluation.methods.decoding import DecodeSettings
from evaluation.methods.fim_bias import BiasFile, write_bias_file
from evaluation.methods.found_in_middle import estimate_bias
from evaluation.model_loading import load_model
from evaluation.prompt_format import PromptFormat
from evaluation.runner import prepare_task


def make_bias_file(model, tokenizer, args: argparse.Namespace) -> BiasFile:
    """The bias of `args.method` estimated on the calibration prompts `args` describes."""
    params = calibration_params(args)
    prompt_format = PromptFormat(args.chat_template, args.system_prompt)
    prepared = prepare_task(args.task, params, model, tokenizer, DecodeSettings(max_new_tokens=1), prompt_format)
    record = {
        "task": args.task,
        "params": params,
        "prompts": len(prepared.prompts),
        **prompt_format.describe(tokenizer),
    }
    return estimate_bias(model, tokenizer, prepared.prompts, build_method(args.method), args.batch_size, record)


def main(args: argparse.Namespace) -> int:
    """Load the model, estimate the bias on the calibration prompts, write the file (a missing data file or model,
    a prompt too long for the model: one line, exit code 2, from `python -m evaluation`'s dispatch)."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    start = time.perf_counter()
    bias = make_bias_file(model, tokenizer, args)
    seconds = time.perf_counter() - start
    write_bias_file(args.out, bias)
    buckets = ", ".join(f"{name} ({entry['prompts']} prompts)" for name, entry in bias.buckets.items())
    print(f"{args.out}: {bias.num_items} items, buckets {buckets}; {seconds:.1f} s")
    return 0
