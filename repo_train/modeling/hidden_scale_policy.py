"""PositionalHidden's attention rule (Yu et al., ACL Findings 2025) as a wrapper around a layer's position policy.

In a chosen layer, the attention input `h` (after the layer's input norm) gets its "positional" channels
`dims` multiplied by `factor` (tokens at positions >= `skip_first` only): `h'`. What the authors' Llama
attention does with it (positional_hidden/models/modeling_llama_hidden_scale.py):

- a forward over a whole sequence (no cache yet): every row attends as the untouched model does, except the
  last `last_recompute_tokens` rows, which are recomputed with queries and keys from `h'` (values from `h'`
  too when `change_value`, else from `h`);
- the cache keeps the keys from `h'` (and the values the recomputed rows used);
- a decoding step (one token after a cache): its query, key (and with `change_value`, value) come from `h'`.

A forward of several tokens after a cache (a continuation fed at once) is an error in the authors' code; here
every one of its rows is recomputed, which is what feeding them one token at a time gives (the teacher-forced
scoring of their validation script: `evaluation/methods/positional_hidden.py`).

`skip_first` counts token positions (`position_ids`), so a decoding step past it is scaled; the authors' code
counts the columns of each forward instead, so there a decoding step is never scaled when `skip_first > 0`
(every file they publish has `skip_first: 0`, where both agree).

Computation: the layer's one attention pass runs on the scaled q/k/v (so the cache gets what the authors
cache); when some rows keep the untouched attention, `finish` recomputes those rows with the untouched q/k/v
(only keys before them: the attention is causal) and puts them in place. A prefill thus costs about one more
attention pass in each chosen layer; a decoding step costs what the untouched step costs plus one scaled copy
of the token's hidden state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from repo_train.modeling.attention import _eager_attention_of, _expand_heads
from repo_train.modeling.policy import AttentionInput, PositionPolicy


@dataclass(frozen=True)
class HiddenScale:
    """The authors' per-model setting (their configs/*.json keys), for the layers it applies to."""

    dims: tuple[int, ...]
    factor: float
    skip_first: int = 0
    last_recompute_tokens: int = 1
    change_value: bool = False

    @property
    def changes_nothing(self) -> bool:
        """True when the scaled input equals the input: no channel, or factor 1."""
        return not self.dims or self.factor == 1


def _first_rows_mask(attention_mask, rows: int):
    """The attention mask of the first `rows` queries over the first `rows` keys (None stays None)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 2:  # flash-attention's padding mask [B, S]
        return attention_mask[:, :rows]
    return attention_mask[..., :rows, :rows]


class HiddenScalePolicy(PositionPolicy):
    """A chosen layer under PositionalHidden: positions as `inner` gives them, attention input as the authors scale it.

    `prefill_rows` (the authors' `last_recompute_tokens`) may be changed between forwards by the method that
    installed the policy (teacher-forced scoring recomputes only the prompt's last row, then every fed token).
    """

    name = "positional_hidden"

    def __init__(self, inner: PositionPolicy, scale: HiddenScale):
        if isinstance(inner, HiddenScalePolicy):
            raise ValueError(  # noqa: TRY004  (a user's stack: exit 2, one line)
                "positional_hidden: this layer is already scaled by positional_hidden; give the method once"
            )
        if type(inner).attend is not PositionPolicy.attend:
            raise ValueError(
                f"positional_hidden: layer policy {inner.describe()!r} computes its own attention (STRING), "
                "which the recomputed rows would bypass; run the two methods separately"
            )
        self.inner, self.scale = inner, scale
        self.per_head, self.needs_encoding = inner.per_head, inner.needs_encoding
        self.prefill_rows = scale.last_recompute_tokens
        self._dims: dict[torch.device, torch.Tensor] = {}

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        return self.inner.rotation(attention, hidden_states, position_ids, shared, record)

    def learned_modules(self, config) -> dict[str, nn.Module]:
        return self.inner.learned_modules(config)

    def init_learned(self, name: str, module: nn.Module) -> None:
        self.inner.init_learned(name, module)

    def describe(self) -> str:
        return f"positional_hidden({self.inner.describe()})"

    def scaled_input(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """`h'`: the channels `dims` of the tokens at positions >= skip_first multiplied by `factor`."""
        device = hidden_states.device
        if device not in self._dims:
            self._dims[device] = torch.tensor(self.scale.dims, dtype=torch.long, device=device)
        dims = self._dims[device]
        channels = hidden_states.index_select(-1, dims)
        scaled = channels * self.scale.factor
        if self.scale.skip_first > 0:
            keep = (position_ids < self.scale.skip_first)[..., None]
            scaled = torch.where(keep, channels, scaled)
        return hidden_states.index_copy(-1, dims, scaled.to(hidden_states.dtype))

    def attention_input(self, attention, hidden_states, position_ids, past_key_values) -> AttentionInput | None:
        if self.scale.changes_nothing:
            return None
        scaled = self.scaled_input(hidden_states, position_ids)
        query, key, value = attention._project_qkv(scaled)
        if not self.scale.change_value:
            value = attention.v_proj(hidden_states).view(*hidden_states.shape[:-1], -1, attention.head_dim)
            value = value.transpose(1, 2)
        past = past_key_values.get_seq_length(attention.layer_idx) if past_key_values is not None else 0
        untouched = hidden_states.shape[1] - self.prefill_rows
        if past > 0 or untouched <= 0:  # every row is recomputed
            return AttentionInput(query, key, value)

        def finish(output, rotation, attention_mask, kwargs):
            return self._untouched_rows(attention, hidden_states, untouched, output, rotation, attention_mask, kwargs)

        return AttentionInput(query, key, value, finish)

    def _untouched_rows(self, attention, hidden_states, rows, output, rotation, attention_mask, kwargs):
        """`output` with its first `rows` rows replaced by the untouched model's attention for them."""
        query, key, value = attention._project_qkv(hidden_states)
        if self.per_head:
            groups = attention.config.num_attention_heads // attention.config.num_key_value_heads
            key, value = _expand_heads(key, groups), _expand_heads(value, groups)
        if rotation is not None:
            query, key = rotation.apply(query, key)
        query, key, value = query[:, :, :rows], key[:, :, :rows], value[:, :, :rows]
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            attention.config._attn_implementation, _eager_attention_of(type(attention))
        )
        first, _ = interface(
            attention,
            query,
            key,
            value,
            _first_rows_mask(attention_mask, rows),
            dropout=0.0,
            scaling=attention.scaling,
            **kwargs,
        )
        first = first.reshape(*hidden_states.shape[:1], rows, -1)
        return torch.cat([first.to(output.dtype), output[:, rows:]], dim=1)
