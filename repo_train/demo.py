"""The built-in default of the main job (stage of the foundation issue).

Builds a tiny OLMo-2 with REPO, trains it a few steps on a fixed batch, runs
greedy generation with the KV cache (checked against recomputation), and
prints parameter counts and the positions REPO assigns. Needs no files.
"""

from __future__ import annotations

import time

import torch

from repo_train.modeling import RePoOlmo2ForCausalLM, record_positions
from repo_train.modeling.accounting import config_parameter_report, parameter_report
from repo_train.modeling.presets import preset


def _copy_batch(vocab: int, seq_len: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Sequences whose second half repeats the first: learnable in a few steps, and positional."""
    half = seq_len // 2
    first = torch.randint(2, vocab, (batch, half), generator=generator)
    return torch.cat([first, first, torch.ones(batch, seq_len - 2 * half, dtype=torch.long)], dim=1)


def check_lengths(seq_len: int, new_tokens: int, context: int) -> None:
    """Refuse at once, with the numbers, lengths the tiny model's context cannot hold (they would run for hours)."""
    if not 8 <= seq_len <= context:
        raise ValueError(f"--seq_len {seq_len}: the tiny model trains on 8 to {context} tokens (its context)")
    prompt = seq_len // 2 + 4
    if prompt + new_tokens > context:
        raise ValueError(
            f"--new_tokens {new_tokens}: the {prompt}-token prompt plus {new_tokens} new tokens exceed the tiny model's "
            f"{context}-token context; ask for at most {context - prompt}"
        )


def run(args, _parser=None) -> int:
    """The `demo` command, once `repo_train.cli` has parsed its options."""
    torch.manual_seed(args.seed)
    config = preset(args.preset, position_method=args.method)
    if args.preset != "tiny":
        print(f"[demo] {args.preset} with {args.method}: {config_parameter_report(config)}")
        print("[demo] only the tiny preset is run on this machine; larger ones report their size.")
        return 0
    check_lengths(args.seq_len, args.new_tokens, config.max_position_embeddings)
    model = RePoOlmo2ForCausalLM(config)
    print(f"[demo] tiny OLMo-2, {config.num_hidden_layers} layers, d={config.hidden_size}, method={args.method}")
    print(f"[demo] policies per layer: {[p.describe() for p in model.position_policies]}")
    print(f"[demo] {parameter_report(model)}")
    for name in ("olmo2-1b", "olmo2-7b"):
        print(f"[demo] {name} + {args.method}: {config_parameter_report(preset(name, position_method=args.method))}")

    generator = torch.Generator().manual_seed(args.seed)
    batch = _copy_batch(config.vocab_size, args.seq_len, 8, generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    start = time.perf_counter()
    for step in range(args.steps):
        loss = model(batch, labels=batch).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step in (0, args.steps - 1) or (step + 1) % 10 == 0:
            print(f"[demo] step {step + 1:3d}  loss {loss.item():.4f}  grad-norm {grad_norm.item():.3f}")
    print(f"[demo] {args.steps} forward/backward steps in {time.perf_counter() - start:.1f}s")

    model.eval()
    prompt = batch[:1, : args.seq_len // 2 + 4]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False, min_new_tokens=args.new_tokens)
        recomputed = model(out).logits[:, prompt.shape[1] - 1 : -1].argmax(-1)
    new = out[0, prompt.shape[1] :].tolist()
    target = batch[0, prompt.shape[1] : prompt.shape[1] + args.new_tokens].tolist()
    print(f"[demo] generated {new}")
    print(f"[demo] expected  {target}  ({sum(a == b for a, b in zip(new, target))}/{len(target)} copied)")
    print(f"[demo] cached generation equals recomputation: {torch.equal(recomputed[0], out[0, prompt.shape[1] :])}")

    with torch.no_grad(), record_positions(model) as rec:
        model(prompt)
    print("[demo] positions per layer (head 0, first 8 tokens; None = NoPE):")
    for layer, positions in enumerate(rec.positions):
        if positions is None:
            print(f"  layer {layer}: None")
            continue
        head0 = ", ".join(f"{v:.2f}" for v in positions[0, 0, :8].tolist())
        ranges = (positions[0].amax(-1) - positions[0].amin(-1)).tolist()
        print(f"  layer {layer}: [{head0}, ...]  range per head: {', '.join(f'{r:.2f}' for r in ranges)}")
    return 0
