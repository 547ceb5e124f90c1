"""Paths of the packaged Lost in the Middle sample (evaluation/data/lost_in_the_middle/README.md), tiny models."""

from __future__ import annotations

import pytest

from evaluation.sample_data import KV_RETRIEVAL_75_KEYS, NQ_OPEN_ORACLE


@pytest.fixture
def nq_oracle_path() -> str:
    """First 40 questions of nq-open-oracle.first2000.jsonl.gz."""
    return str(NQ_OPEN_ORACLE)


@pytest.fixture
def kv_path() -> str:
    """First 12 examples of kv-retrieval-75_keys.jsonl.gz."""
    return str(KV_RETRIEVAL_75_KEYS)


def spread_logits(model, factor: float = 5.0):
    """Scale a random model's matrices so greedy choices have margins far above float noise (no near-ties).

    This is what lets tests compare greedy tokens of different float paths exactly (cache vs recomputation,
    batched vs alone, our loop vs HF `generate`): measured over the evaluation tests, the smallest gap between
    the best and second-best logit at any greedy step is 4.4e-4 of max |logits|, while the logits of two such
    paths differ by <= 1e-6 of it (1 and 2 threads; see tests/float_checks.py). A near-tie flip would need
    several hundred times that drift.
    """
    import torch

    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(factor)
    return model


@pytest.fixture
def tiny_lm():
    """The harness's built-in tiny OLMo-2 (random, logits spread) and its byte tokenizer."""
    from evaluation.model_loading import tiny_default

    model, tokenizer = tiny_default(seed=0)
    return spread_logits(model), tokenizer


@pytest.fixture
def spread():
    """`spread(model)`: see `spread_logits`."""
    return spread_logits
