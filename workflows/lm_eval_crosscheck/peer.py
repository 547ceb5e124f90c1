"""lm-eval's side: its HF backend (`HFLM`) around the same model object and tokenizer, fed the harness's exact
prompt strings (`generate_until`, `loglikelihood`). lm-eval is an optional extra: imported only here, when
the cross-check runs."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from evaluation.methods.decoding import DecodeSettings
from workflows.lm_eval_crosscheck.names import COMMAND

LM_EVAL_HINT = "lm-eval is not installed: scripts/setup.sh --real (or pip install -e '.[crosscheck]')"


def peer(model, tokenizer, batch_size: int, add_special_tokens: bool, max_length: int):
    """lm-eval's HF backend around the same model object and tokenizer.

    `add_bos_token` is set to the harness's choice: it is the `add_special_tokens` lm-eval passes to the
    tokenizer (None would leave the tokenizer's default, which is the same for a raw prompt, but not for a
    chat-templated one). `max_length` is the harness's length budget, so neither side truncates differently.
    """
    try:
        from lm_eval.models.huggingface import HFLM  # an optional extra: its absence is one line
    except ImportError as err:
        raise SystemExit(f"{COMMAND}: error: {LM_EVAL_HINT} ({err})") from None
    return HFLM(
        pretrained=model,
        tokenizer=tokenizer,
        batch_size=batch_size,
        max_length=max_length,
        add_bos_token=add_special_tokens,
    )


def requests(texts: Sequence[str], settings: DecodeSettings) -> list:
    """lm-eval `generate_until` instances of the prompts: greedy, cut at the stop strings, at most N new tokens."""
    from lm_eval.api.instance import Instance  # an optional extra, imported with the peer

    return [
        Instance(
            request_type="generate_until",
            arguments=(
                text,
                {"until": list(settings.stop_strings), "max_gen_toks": settings.max_new_tokens, "do_sample": False},
            ),
            doc={},
            idx=index,
        )
        for index, text in enumerate(texts)
    ]


def run_peer(lm, texts: Sequence[str], settings: DecodeSettings) -> tuple[float, list[str]]:
    """Seconds and continuations (row order) of lm-eval's `generate_until` on the prompts."""
    batch = requests(texts, settings)
    start = time.perf_counter()
    out = lm.generate_until(batch, disable_tqdm=True)
    return time.perf_counter() - start, out


@contextmanager
def recording(lm) -> Iterator[list[dict[str, torch.Tensor]]]:
    """Inside the block, every `lm._model_generate` call's input ids, attention mask and output are kept."""
    calls: list[dict[str, torch.Tensor]] = []
    original = lm._model_generate

    def record(context, max_length, stop, **kwargs):
        output = original(context=context, max_length=max_length, stop=stop, **kwargs)
        calls.append(
            {"input_ids": context.cpu(), "attention_mask": kwargs["attention_mask"].cpu(), "output": output.cpu()}
        )
        return output

    lm._model_generate = record
    try:
        yield calls
    finally:
        del lm._model_generate  # the class's method again


def run_peer_loglik(lm, texts: Sequence[str], golds: Sequence[str]) -> tuple[float, list[tuple[float, bool]]]:
    """Seconds and (summed log-probability, is greedy) of lm-eval's `loglikelihood` on each (prompt, gold)."""
    from lm_eval.api.instance import Instance  # an optional extra, imported with the peer

    batch = [
        Instance(request_type="loglikelihood", arguments=(text, gold), doc={}, idx=index)
        for index, (text, gold) in enumerate(zip(texts, golds))
    ]
    start = time.perf_counter()
    out = lm.loglikelihood(batch, disable_tqdm=True)
    return time.perf_counter() - start, [(float(total), bool(greedy)) for total, greedy in out]


def whitespace_scores(lm, texts: Sequence[str]) -> list[tuple[float, bool] | None]:
    """lm-eval's (log-probability, is greedy) of each context's trailing whitespace after the rest of it (what its
    `_encode_pair` moves into the answer), or None where the context ends in no whitespace."""
    _, trailing = run_peer_loglik(lm, [t.rstrip() for t in texts if t != t.rstrip()],
                                  [t[len(t.rstrip()):] for t in texts if t != t.rstrip()])  # fmt: skip
    scores = iter(trailing)
    return [next(scores) if t != t.rstrip() else None for t in texts]
