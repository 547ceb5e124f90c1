"""LPES as a position policy: layer h sees positions `position_ids / s_h` (paper Eq. 2).

The core's `ScaledRopePolicy` in every RoPE layer: identical to
`RopePolicy(encoding)` except that token i gets position i / s in that layer;
the encoding (base, YaRN, …) is the model's own, so s = 1 reproduces the
untouched layer bit for bit.

`with scaled_model(model, scales):` scales the layers of any model the policy
hook supports (OLMo-2, Llama, Qwen2, Qwen3, Mistral) and puts the previous
policies back afterwards, so a search scores many scale vectors on one loaded
model. Scales follow the core's one rule: they multiply a layer's current
scale, so on the unscaled model the search loads each candidate's scales are
exactly the layers' scales.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from repo_train.modeling.scaling import scaled_policies
from repo_train.modeling.swapping import swapped_policies


@contextmanager
def scaled_model(model: nn.Module, scales: Sequence[float]) -> Iterator[nn.Module]:
    """`with scaled_model(model, scales): …` scores the model under LPES scales and restores it afterwards."""
    with swapped_policies(model, scaled_policies(model, scales, method="LPES")):
        yield model
