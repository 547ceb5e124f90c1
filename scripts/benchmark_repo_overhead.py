#!/usr/bin/env python
"""REPO vs RoPE: training-step time and parameter overhead, side by side in one run.

Builds two OLMo-2 models of the same shape that differ only in the position
method, then alternates forward+backward steps between them (A, B, A, B, ...)
so both see the same machine state, and prints median times and the ratio.
Also prints the exact parameter overhead for the OLMo-2 1B and 7B shapes.

    python scripts/benchmark_repo_overhead.py --seq-len 1024 --hidden 256 --layers 6
"""

from __future__ import annotations

import argparse
import textwrap
import time

import torch

from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.accounting import config_parameter_report, parameter_report, training_flops_per_token
from repo_train.modeling.presets import olmo2_1b, olmo2_7b, tiny
from repo_train.scripting.benchmarking import alternate, summary


def step_time(model, batch) -> float:
    start = time.perf_counter()
    model(batch, labels=batch).loss.backward()
    elapsed = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=10, help="timed A/B pairs (after 2 warm-up pairs)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    shape = dict(
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        vocab_size=args.vocab,
        max_position_embeddings=max(2048, args.seq_len),
    )
    torch.manual_seed(0)
    models = {
        method: RePoOlmo2ForCausalLM(tiny(position_method=method, **shape)).train() for method in ("rope", "repo")
    }
    batch = torch.randint(2, args.vocab, (args.batch, args.seq_len))
    result = alternate(
        lambda: step_time(models["rope"], batch), lambda: step_time(models["repo"], batch), args.rounds, warmup=2
    )

    config = models["repo"].config
    print(
        f"shape: d={args.hidden} layers={args.layers} heads={args.heads} seq_len={args.seq_len} "
        f"batch={args.batch} threads={args.threads}; REPO from layer {config.repo_start_layer}, d_p={config.repo_hidden_size}"
    )
    print("  forward+backward step:")
    print(textwrap.indent(summary(result, "RoPE", "REPO", unit="ms"), "    "))
    flops = {m: training_flops_per_token(models[m].config, args.seq_len) for m in models}
    print(f"  model FLOPs ratio REPO/RoPE: {flops['repo'] / flops['rope']:.4f}")
    print(f"  parameters: {parameter_report(models['repo'])}")
    for name, build, start in (("OLMo-2 1B", olmo2_1b, 5), ("OLMo-2 7B", olmo2_7b, 10)):
        report = config_parameter_report(build(position_method="repo", repo_start_layer=start))
        print(f"  {name}, REPO from layer {start}: {report}")


if __name__ == "__main__":
    main()
