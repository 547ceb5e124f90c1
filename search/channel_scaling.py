"""How the dimension search applies a candidate: the authors' scaling of the attention input, as forward hooks.

PositionalHidden multiplies chosen channels of a layer's attention input (the hidden state after the layer's
input norm) by a factor before the query and key projections, from token `skip_first` on; with `change_value`
the value projection reads the scaled input too (positional_hidden/models/modeling_llama_hidden_scale.py,
commit f3bcd5560c2b080233e9f12ae60b8c42880faf97). Here the projections' inputs are scaled by pre-hooks on
`q_proj`, `k_proj` (and `v_proj`) of the chosen layers, for every row of the sequence.

The authors' attention recomputes only the last `last_recompute_tokens` rows with the scaled queries and keys
(their validation sets it to the answer's length + 1) and keeps the unscaled attention for the rows before;
scaling every row, as here, also changes the prompt's rows. This is the search's own, minimal application, kept
in this one function so that the method `positional_hidden` can take its place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each decoder layer's attention module, in layer order (Llama-style models: `model.model.layers[i].self_attn`)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or not all(hasattr(layer, "self_attn") for layer in layers):
        raise ValueError(f"{type(model).__name__}: no model.layers[i].self_attn; the search needs a Llama-style model")
    return [layer.self_attn for layer in layers]


@contextmanager
def scaled_channels(
    model: torch.nn.Module,
    dims: Sequence[int],
    layers: Sequence[int],
    factor: float,
    *,
    skip_first: int = 0,
    change_value: bool = False,
) -> Iterator[None]:
    """Within the block, the attention input's channels `dims` are multiplied by `factor` in `layers`."""
    index = torch.tensor(list(dims), dtype=torch.long)

    def scale(_module: torch.nn.Module, args: tuple) -> tuple:
        hidden = args[0].clone()
        hidden[:, skip_first:, index.to(hidden.device)] *= factor
        return (hidden, *args[1:])

    handles = []
    names = ("q_proj", "k_proj", "v_proj") if change_value else ("q_proj", "k_proj")
    modules = attention_modules(model)
    try:
        if len(index):
            for layer in layers:
                handles += [getattr(modules[layer], name).register_forward_pre_hook(scale) for name in names]
        yield
    finally:
        for handle in handles:
            handle.remove()
