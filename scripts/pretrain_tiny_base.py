#!/usr/bin/env python
"""Pre-train the tiny RoPE OLMo-2 base that the quickstart continues from (workflows/assets/tiny-kv-base).

    python scripts/pretrain_tiny_base.py --out workflows/assets/tiny-kv-base   # ~2,500 steps, ~10 min on 2 cores

The REPO paper continues OLMo-2 checkpoints, which already read their context.
A tiny model has to learn that first, and on a CPU that is the slow part: its
retrieval needs an induction circuit (match the query key earlier in the
context, copy what followed it), which forms abruptly after a long plateau
(here around step 1,700; see docs/status-log.md for the failed recipes). This script
makes that base once, so the quickstart's continual training (the real
Lightning path, RoPE and REPO) starts from a model that retrieves.

Data, generated on the fly from the seed (byte tokenizer, loss on the
predictable tokens only):
- half the sequences: a random string of 8–24 characters, a space, the string
  again (the loss is on the copy: pure induction);
- half: key-value streams in the harness's "pairs" KV format (key letters a–p,
  upper-case hex values, e.g. "c3 aF c3 k0 ..."), 8 keys per stream, 24 pairs
  drawn with repetition (the loss is on the values of keys seen before).
Every `--eval_every` steps it reports accuracy on held-out "pairs" prompts
(8 keys, gold at each position), the harness's own format.

A plain PyTorch loop (no Lightning): this stands in for the pre-training of the
base checkpoint, which is not this project's job.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonargparse.typing import NonNegativeInt, PositiveInt

from evaluation.tasks import build_task
from repo_common.atomic import write_text_atomic
from repo_common.config_cli import ConfigParser, add_dataclass_options, config_values, dump_config, typed_options

#: `torch.Tensor` in the annotations, without importing torch (--help answers without it; a TYPE_CHECKING import
#: would not do: jsonargparse runs those blocks when it reads the options' dataclass).
Tensor = Any

KEY_LETTERS = "abcdefghijklmnop"
VALUE_DIGITS = "0123456789ABCDEF"
COPY_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"


PROG = "scripts/pretrain_tiny_base.py"


@dataclass
class Pretraining:
    """The pre-training options (each also a key of a `--config` file), judged when built."""

    out: str = "workflows/assets/tiny-kv-base"
    """HF model directory to write"""
    steps: PositiveInt = 2500
    """optimizer steps"""
    batch: PositiveInt = 32
    """sequences per step"""
    lr: float = 2e-3
    """peak learning rate (linear decay to 0)"""
    warmup: PositiveInt = 50
    """linear warm-up steps"""
    hidden: PositiveInt = 128
    """model width (FFN 4x)"""
    layers: PositiveInt = 4
    """decoder layers"""
    keys: PositiveInt = 8
    """distinct keys per stream (and per held-out prompt)"""
    pairs: PositiveInt = 24
    """pairs per training stream"""
    eval_every: PositiveInt = 250
    """steps between held-out evaluations"""
    seed: int = 0
    """seed of the weights and the generated data"""
    threads: NonNegativeInt = 0
    """torch threads (0 = torch's default)"""

    def __post_init__(self) -> None:
        """Keys are drawn from KEY_LETTERS without repetition, so there can be at most that many."""
        if self.keys > len(KEY_LETTERS):
            raise ValueError(
                f"--keys {self.keys}: at most {len(KEY_LETTERS)} distinct keys (the letters {KEY_LETTERS})"
            )


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    add_dataclass_options(parser, Pretraining)
    return parser


def parse_args(argv: list[str] | None = None) -> Pretraining:
    """The checked options; a mistake is one line and exit code 2, `--print_config` prints them and exits."""
    return typed_options(build_parser(), argv)


def copy_sequence(rng: random.Random, tokenizer) -> tuple[list[int], list[int]]:
    """A random string, a space, the string again; labels on the copy after its first character."""
    text = "".join(rng.choice(COPY_ALPHABET) for _ in range(rng.randint(8, 24)))
    ids = tokenizer(f"{text} {text}", add_special_tokens=False).input_ids
    start = len(text) + 2  # the copy's first character cannot be predicted: nothing says the copy starts
    return ids, [-100] * start + ids[start:]


def pair_stream(rng: random.Random, tokenizer, keys: int, pairs: int) -> tuple[list[int], list[int]]:
    """ "k v k v ..." pairs with repeated keys; labels on the values of keys that appeared before."""
    chosen = rng.sample(KEY_LETTERS, keys)
    values = {key: rng.choice(VALUE_DIGITS) for key in chosen}
    ids, labels, seen = [], [], set()
    for _ in range(pairs):
        key = rng.choice(chosen)
        piece = tokenizer(f"{key}{values[key]} ", add_special_tokens=False).input_ids  # key, value, space
        ids += piece
        labels += [-100, piece[1] if key in seen else -100, -100]
        seen.add(key)
    return ids, labels


def batch(rng: random.Random, tokenizer, args) -> tuple[Tensor, Tensor]:
    import torch  # lazy: --help answers without torch

    rows = [
        copy_sequence(rng, tokenizer) if rng.random() < 0.5 else pair_stream(rng, tokenizer, args.keys, args.pairs)
        for _ in range(args.batch)
    ]
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    return ids, labels


def held_out(tokenizer, keys: int, seed: int) -> tuple[Tensor, Tensor, list[int]]:
    """Harness "pairs" prompts (gold at every position; all of one length) and the first value token."""
    import torch  # lazy: --help answers without torch

    task = build_task(
        "kv", num_keys=keys, num_examples=16, key_chars=1, template="pairs", gold_positions="all", seed=seed
    )
    rows = list(task.rows())
    ids = torch.tensor([tokenizer(r["prompt"], add_special_tokens=False).input_ids for r in rows])
    gold = torch.tensor([tokenizer(r["value"], add_special_tokens=False).input_ids[0] for r in rows])
    return ids, gold, [r["gold_position"] for r in rows]


def accuracy(model, ids: Tensor, gold: Tensor, positions: list[int]) -> tuple[float, list[float]]:
    import torch  # lazy: --help answers without torch

    with torch.no_grad():
        correct = (model(ids).logits[:, -1].argmax(-1) == gold).float()
    by = [correct[[i for i, p in enumerate(positions) if p == k]].mean().item() for k in sorted(set(positions))]
    return correct.mean().item(), by


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch  # lazy: --help answers without torch

    from evaluation.model_loading import byte_tokenizer  # lazy: --help answers without torch
    from repo_train.modeling import RePoOlmo2ForCausalLM
    from repo_train.modeling.presets import tiny

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = byte_tokenizer()
    config = tiny(
        vocab_size=len(tokenizer),
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        position_method="rope",
    )
    model = RePoOlmo2ForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / args.warmup) * max(0.0, 1.0 - s / args.steps)
    )
    rng = random.Random(args.seed)
    eval_ids, eval_gold, eval_positions = held_out(tokenizer, args.keys, seed=args.seed + 1)
    history, started, smoothed = [], time.perf_counter(), None
    for step in range(1, args.steps + 1):
        model.train()
        ids, labels = batch(rng, tokenizer, args)
        loss = model(ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        smoothed = loss.item() if smoothed is None else 0.9 * smoothed + 0.1 * loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            acc, by = accuracy(model, eval_ids, eval_gold, eval_positions)
            seconds = time.perf_counter() - started
            history.append({"step": step, "loss": round(smoothed, 4), "accuracy": acc, "seconds": round(seconds)})
            by_text = " ".join(f"{a:.2f}" for a in by)
            print(
                f"step {step}: loss {smoothed:.3f}, held-out accuracy {acc:.3f} [{by_text}], {seconds:.0f} s",
                flush=True,
            )
    out = Path(args.out)
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    final = history[-1]
    settings = {key: value for key, value in config_values(args).items() if key != "out"}
    write_text_atomic(out / "README.md", _readme(settings, history, final))
    write_text_atomic(out / "config.yaml", dump_config(config_values(args)))  # --config replays it
    print(f"wrote {out} (held-out accuracy {final['accuracy']:.3f})")


def _readme(settings: dict, history: list[dict], final: dict) -> str:
    rows = "\n".join(f"| {h['step']} | {h['loss']:.3f} | {h['accuracy']:.3f} | {h['seconds']} |" for h in history)
    return f"""# tiny-kv-base

A 4-layer RoPE OLMo-2 (byte tokenizer, {settings["hidden"]} wide) pre-trained by
`scripts/pretrain_tiny_base.py` to read its context: copying and key-value
retrieval in the harness's "pairs" KV format. The quickstart continues it with
RoPE and with REPO. Made by this project (same licence as the code); no
external data.

Settings: `{json.dumps(settings)}`

| step | loss (smoothed) | held-out accuracy ({settings["keys"]} keys, gold at every position) | seconds |
|---|---|---|---|
{rows}

Final held-out accuracy: {final["accuracy"]:.3f}.
"""


if __name__ == "__main__":
    main()
