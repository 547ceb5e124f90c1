"""`python -m workflows benchmark-harness`'s measuring (workflows.benchmarks.harness: its options)."""

from __future__ import annotations

import random
import time

import torch
from transformers import Olmo2Config, Olmo2ForCausalLM

from evaluation.generation import plan_batches, tokenize_prompts
from evaluation.methods.decoding import DecodeSettings, collate, generate_batch
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.benchmarking import alternate, summary
from workflows.benchmarks.harness import HarnessBenchmark


def build_model(family: str, vocab: int, hidden: int, layers: int, heads: int):
    shape = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
    )
    if family == "repo_olmo2":
        return RePoOlmo2ForCausalLM(tiny(**shape)).eval()
    config = Olmo2Config(**shape, max_position_embeddings=4096, pad_token_id=0, eos_token_id=1)
    return Olmo2ForCausalLM(config).eval()


def make_prompts(count: int, low: int, high: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "and",
        "document",
        "question",
        "answer",
        "title",
        "passage",
        "river",
        "city",
        "year",
        "king",
        "war",
        "music",
        "film",
    ]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(low, high) // 6)) for _ in range(count)]


def ours(model, tokenizer, batches, settings) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    tokens = []
    for batch in batches:
        tokens += [o.token_ids for o in generate_batch(model, tokenizer, batch, settings)]
    return time.perf_counter() - start, tokens


@torch.no_grad()
def hf(model, batches, new_tokens: int) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    tokens = []
    for batch in batches:
        out = model.generate(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,  # explicit: RePoOlmo2's forward(**kwargs) hides that it takes them
            max_new_tokens=new_tokens,
            do_sample=False,
        )
        width = batch.input_ids.shape[1]
        for row in out[:, width:].tolist():
            tokens.append(row[: row.index(1)] if 1 in row else row)  # ours drops the EOS and what follows
    return time.perf_counter() - start, tokens


def main(args: HarnessBenchmark) -> None:
    """Time both loops, then batching, and print the comparison."""
    if args.threads is None:
        args.threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    tokenizer = byte_tokenizer()
    model = build_model(args.family, len(tokenizer), args.hidden, args.layers, args.heads)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1
    prompts = tokenize_prompts(tokenizer, make_prompts(args.prompts, args.min_chars, args.max_chars, seed=0))
    settings = DecodeSettings(max_new_tokens=args.new_tokens, batch_size=8)

    def batches(size: int):
        plan = plan_batches([len(p.input_ids) for p in prompts], size)
        return [collate([prompts[i] for i in indices], tokenizer.pad_token_id) for indices in plan]

    batched = batches(8)
    print(
        f"{args.family}: d={args.hidden}, {args.layers} layers, {args.prompts} prompts of "
        f"{min(len(p.input_ids) for p in prompts)}-{max(len(p.input_ids) for p in prompts)} tokens, "
        f"{args.new_tokens} new tokens, batch 8, {args.threads} threads"
    )
    tokens: dict[str, list] = {"generate": [], "ours": []}  # each call's tokens, warm-up pair first

    def run_hf() -> float:
        seconds, out = hf(model, batched, args.new_tokens)
        tokens["generate"].append(out)
        return seconds

    def run_ours() -> float:
        seconds, out = ours(model, tokenizer, batched, settings)
        tokens["ours"].append(out)
        return seconds

    result = alternate(run_hf, run_ours, args.rounds, warmup=1)
    timed = {name: runs[1:] for name, runs in tokens.items()}
    for round_, (t_hf, t_ours, tok_ours) in enumerate(zip(result.a, result.b, timed["ours"])):
        generated = sum(len(t) for t in tok_ours)
        print(
            f"round {round_}: ours {t_ours:.3f}s ({generated / t_ours:.0f} tok/s), "
            f"generate {t_hf:.3f}s ({generated / t_hf:.0f} tok/s), ratio {t_ours / t_hf:.3f}"
        )
    print(summary(result, "generate", "ours"))
    print(f"same tokens as generate: {timed['ours'] == timed['generate']}")

    single = batches(1)
    speedup = alternate(
        lambda: ours(model, tokenizer, batched, settings)[0],
        lambda: ours(model, tokenizer, single, settings)[0],
        args.rounds,
    )
    for round_, (t8, t1) in enumerate(zip(speedup.a, speedup.b)):
        print(f"round {round_}: batch 1 {t1:.3f}s, batch 8 {t8:.3f}s, speed-up {t1 / t8:.2f}x")
    print(f"batching speed-up (batch 1 time / batch 8 time): median {speedup.median_ratio:.2f}x")
