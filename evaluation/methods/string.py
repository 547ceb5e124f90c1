"""STRING (An et al., ICLR 2025): shift the well-trained small positions over the ineffective large ones.

`string:shifted_offset=S,small_local_value=W` gives every RoPE layer the core's `StringPolicy`
(`repo_train.modeling.string_policy`, where the rule and its two forms, whole sequence and decoding step, are
written out): keys within S tokens are read with normal positions, farther keys from a query moved back by
S - W positions, all logits times a² (a = `attention_factor`). The defaults are the authors' (HKUNLP/STRING,
commit 216cc2f, README and `string_for_llama.py`): S = int(0.33 · L) with L the model's
`max_position_embeddings` (what their README reads, `L = config.max_position_embeddings`, also for a model
whose `rope_scaling` names an `original_max_position_embeddings`), W = 128, a = 0.1 ln 2 + 1.
`shifted_offset=0` is their off switch (their demo's "rope: --shifted_offset 0" installs nothing): the
model stays exactly as it was. NoPE layers stay as they are; other policies (REPO, a PI/LPES scale, Ms-PoE)
are refused, since their positions are not STRING's token indices. docs/methods/string.md has the details.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from evaluation.methods.base import register_method
from evaluation.methods.policy_method import PolicyMethod
from repo_train.modeling import NopePolicy, PositionPolicy, RopePolicy, attention_modules
from repo_train.modeling.rope import RotaryEncoding
from repo_train.modeling.scaling import refuse_without_rope
from repo_train.modeling.string_policy import (
    AUTHORS_ATTENTION_FACTOR,
    AUTHORS_LOCAL_VALUE,
    AUTHORS_OFFSET_SHARE,
    StringPolicy,
)


def default_offset(config) -> int:
    """The authors' S for a model: int(0.33 · max_position_embeddings)."""
    length = getattr(config, "max_position_embeddings", None)
    if not length:
        raise ValueError("string: the model config has no max_position_embeddings; give shifted_offset=S")
    return int(AUTHORS_OFFSET_SHARE * length)


@register_method
@dataclass
class String(PolicyMethod):
    """`string:shifted_offset=S,small_local_value=128,attention_factor=1.0693`: STRING in every RoPE layer."""

    name: ClassVar[str] = "string"

    shifted_offset: int | None = None
    """S: keys more than S tokens back are read from a query moved back by S - W positions; unset = the authors'
    int(0.33 · max_position_embeddings); 0 = off (the model untouched)."""
    small_local_value: int = AUTHORS_LOCAL_VALUE
    """W < S: the smallest distance a shifted key is read at (the authors use 128, 256 or 512)."""
    attention_factor: float = AUTHORS_ATTENTION_FACTOR
    """a > 0: RoPE's cos and sin are multiplied by it, so every logit by a² (the authors' 0.1 ln 2 + 1)."""

    def __post_init__(self) -> None:
        if self.shifted_offset is not None and not (isinstance(self.shifted_offset, int) and self.shifted_offset >= 0):
            raise ValueError(f"string: shifted_offset must be an integer >= 0 (0 = off), got {self.shifted_offset!r}")
        if not (isinstance(self.small_local_value, int) and self.small_local_value >= 0):
            raise ValueError(f"string: small_local_value must be an integer >= 0, got {self.small_local_value!r}")
        if self.shifted_offset and self.small_local_value >= self.shifted_offset:
            raise ValueError(
                f"string: small_local_value={self.small_local_value} must be < shifted_offset={self.shifted_offset} "
                "(the shift moves far keys closer, by S - W > 0)"
            )
        if not (math.isfinite(self.attention_factor) and self.attention_factor > 0):
            raise ValueError(f"string: attention_factor must be a finite number > 0, got {self.attention_factor!r}")

    def offset_for(self, config) -> int:
        """S for this model (the given one, or the authors' default), checked against W."""
        offset = default_offset(config) if self.shifted_offset is None else self.shifted_offset
        if offset and self.small_local_value >= offset:
            raise ValueError(
                f"string: small_local_value={self.small_local_value} must be < shifted_offset={offset} (the default "
                "for this model's max_position_embeddings); give a smaller small_local_value or a shifted_offset"
            )
        return offset

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        if any(getattr(attn, "attention_probe", None) is not None for attn in attention_modules(model)):
            raise ValueError(
                "string computes attention itself, so the attention probe of fim (Found in the Middle) would see "
                "nothing; evaluate string and fim separately"
            )
        offset = self.offset_for(model.config)
        if offset == 0:
            return list(current)  # the authors' off switch: nothing installed
        encoding: RotaryEncoding | None = None
        policies: list[PositionPolicy] = []
        for index, policy in enumerate(current):
            if isinstance(policy, NopePolicy):
                policies.append(policy)
            elif type(policy) is RopePolicy:
                encoding = policy.encoding or encoding or RotaryEncoding.from_config(model.config)
                policies.append(StringPolicy(encoding, offset, self.small_local_value, self.attention_factor))
            else:
                raise ValueError(
                    f"string shifts the token positions RoPE reads, but layer {index} uses the {policy.name!r} "
                    "policy; apply string to RoPE (or RoPE/NoPE) models, before no other position method"
                )
        refuse_without_rope(current, "string", "shifts RoPE positions")
        return policies
