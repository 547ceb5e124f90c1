"""How the dimension search applies a candidate: the method's own rule, `HiddenScalePolicy`, swapped in.

A candidate channel is scored as the authors' validation script scores it
(experiments/search_dimension/eval_on_valid_set.py, commit f3bcd5560c2b080233e9f12ae60b8c42880faf97): the chosen
layers' attention input has the channel multiplied by the factor, and the last `answer length + 1` rows of the
teacher-forced forward (the prompt's last token and the answer's) are recomputed with it, the rows before keep
the untouched attention. The policy is the one `positional_hidden` installs
(`repo_train.modeling.hidden_scale_policy`), so a config the search writes is applied by the method exactly as
it was scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch

from repo_train.modeling.hidden_scale_policy import HiddenScale, HiddenScalePolicy
from repo_train.modeling.swapping import current_policies, swapped_policies


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
) -> Iterator[Callable[[int], None]]:
    """Within the block, `layers` run PositionalHidden's rule with channels `dims` times `factor`.

    Yields `recompute_rows(n)`: the next forwards recompute their last `n` rows with the scaled input (the
    authors' `last_recompute_tokens`; their validation sets it to the answer's length + 1).
    """
    scale = HiddenScale(dims=tuple(dims), factor=float(factor), skip_first=skip_first, change_value=change_value)
    chosen = set(layers)
    policies = [
        HiddenScalePolicy(policy, scale) if index in chosen else policy
        for index, policy in enumerate(current_policies(model))
    ]
    scaled = [policy for policy in policies if isinstance(policy, HiddenScalePolicy)]

    def recompute_rows(rows: int) -> None:
        for policy in scaled:
            policy.prefill_rows = rows

    with swapped_policies(model, policies):
        yield recompute_rows
