"""A decoder's size from its config.json alone, so a shape that cannot fit is refused before any allocation.

A config.json with a typo'd or hostile shape (hidden_size 10^6) otherwise dies deep in the allocator, or
swaps the machine for minutes. The estimate counts the embeddings and, per layer, the attention and MLP
matrices of a standard decoder (LLaMA / OLMo layout, gated MLP); norms, biases and position predictors
are small beside them, so it is a close lower bound for the families the project loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def estimated_parameters(config: Mapping[str, Any]) -> int | None:
    """Parameters of the decoder `config` describes, or None when it lacks the usual fields."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    inner = int(config.get("intermediate_size") or 4 * hidden)
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // max(heads, 1))
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o and k, v projections
    mlp = 3 * hidden * inner  # gate, up, down
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * (attention + mlp)


def available_memory() -> int | None:
    """Bytes of RAM the system can still give (Linux's MemAvailable), or None where it cannot tell."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits_in_memory(config: Mapping[str, Any], bytes_per_parameter: int, where: str) -> None:
    """Refuse in one line a config whose weights alone exceed the memory available."""
    parameters = estimated_parameters(config)
    free = available_memory()
    if parameters is None or free is None or parameters * bytes_per_parameter <= free:
        return
    shape = ", ".join(f"{key}={config.get(key)}" for key in ("hidden_size", "num_hidden_layers", "vocab_size"))
    raise ValueError(
        f"{where} describes a model of about {parameters / 1e9:,.1f} B parameters "
        f"({parameters * bytes_per_parameter / 2**30:,.1f} GiB of weights), more than the {free / 2**30:,.1f} GiB "
        f"of memory available ({shape}); check its config.json, or load it on a machine with more memory"
    )
