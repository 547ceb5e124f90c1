"""`python -m workflows benchmark-repo-overhead`'s measuring (workflows.benchmarks.repo_overhead: its options)."""

from __future__ import annotations

import copy
import textwrap

import torch
from torch.profiler import record_function
from transformers import Olmo2ForCausalLM

from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.accounting import config_parameter_report, parameter_report, training_flops_per_token
from repo_train.modeling.olmo2 import learned_policy_keys
from repo_train.modeling.presets import olmo2_1b, olmo2_7b, tiny
from workflows.benchmarking import comparison, interleave, trace_allocations
from workflows.benchmarks.repo_overhead import CLOCKS, RepoOverheadBenchmark

MIB = 2**20


def training_step(model, batch) -> None:
    """Forward (no KV cache, as training runs), then backward inside a `backward` profiler range (the memory trace reads its start)."""
    loss = model(batch, labels=batch, use_cache=False).loss
    with record_function("backward"):
        loss.backward()


def step_time(model, batch, clock) -> float:
    start = clock()
    training_step(model, batch)
    elapsed = clock() - start
    model.zero_grad(set_to_none=True)
    return elapsed


def step_memory(model, batch) -> tuple[int, int]:
    """(peak bytes allocated during one training step, bytes held when backward starts), weights excluded."""
    model.zero_grad(set_to_none=True)
    trace = trace_allocations(lambda: training_step(model, batch))
    model.zero_grad(set_to_none=True)
    return trace.peak, trace.before("backward")


def build_models(args) -> dict[str, torch.nn.Module]:
    """HF OLMo-2, RoPE and REPO models of one shape, with the same weights (REPO has its predictor on top)."""

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
    rope = RePoOlmo2ForCausalLM(tiny(position_method="rope", **shape)).train()
    repo = RePoOlmo2ForCausalLM(tiny(position_method="repo", **shape)).train()
    hf = Olmo2ForCausalLM(copy.deepcopy(rope.config)).train()
    hf.load_state_dict(rope.state_dict())
    missing, unexpected = repo.load_state_dict(rope.state_dict(), strict=False)
    if unexpected or set(missing) != learned_policy_keys(repo):
        raise RuntimeError(
            f"REPO should lack exactly its predictor weights; missing {missing}, unexpected {unexpected}"
        )
    return {"HF": hf, "RoPE": rope, "REPO": repo}


def main(args: RepoOverheadBenchmark) -> None:
    """The three models timed in rotation, then FLOPs, step memory and parameter overheads."""

    if args.threads is None:
        args.threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    models = build_models(args)
    batch = torch.randint(2, args.vocab, (args.batch, args.seq_len))
    clock = CLOCKS[args.clock]
    times = interleave(
        {name: (lambda model=model: step_time(model, batch, clock)) for name, model in models.items()},
        args.rounds,
        warmup=2,
    )

    config = models["REPO"].config
    print(
        f"shape: d={args.hidden} layers={args.layers} heads={args.heads} seq_len={args.seq_len} "
        f"batch={args.batch} threads={args.threads} clock={args.clock}; "
        f"REPO from layer {config.repo_start_layer}, d_p={config.repo_hidden_size}"
    )
    print(f"  forward+backward step, {args.rounds} rounds (order rotated each round):")
    print(textwrap.indent(comparison(times, [("HF", "RoPE"), ("RoPE", "REPO")], unit="ms"), "    "))
    flops = {name: training_flops_per_token(models[name].config, args.seq_len) for name in ("RoPE", "REPO")}
    print(f"  model FLOPs ratio REPO/RoPE: {flops['REPO'] / flops['RoPE']:.4f}")
    memory = {name: step_memory(models[name], batch) for name in ("RoPE", "REPO")}
    print("  memory one training step allocates above the weights (torch.profiler, CPU allocator):")
    for label, index in (("peak", 0), ("held when backward starts", 1)):
        rope, repo = memory["RoPE"][index], memory["REPO"][index]
        print(f"    {label}: RoPE {rope / MIB:.1f} MiB, REPO {repo / MIB:.1f} MiB, REPO/RoPE {repo / rope:.3f}")
    print(f"  parameters: {parameter_report(models['REPO'])}")
    for name, build, start in (("OLMo-2 1B", olmo2_1b, 5), ("OLMo-2 7B", olmo2_7b, 10)):
        report = config_parameter_report(build(position_method="repo", repo_start_layer=start))
        print(f"  {name}, REPO from layer {start}: {report}")
