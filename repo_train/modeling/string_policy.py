"""STRING (An et al., "Why Does the Effective Context Length of LLMs Fall Short?", ICLR 2025) as a layer policy.

STRING keeps the well-trained small relative distances and drops the large, rarely trained ones: a query
attends its near keys with normal RoPE positions and its far keys from a position moved back by
`shifted_offset - small_local_value` (S - W), so the largest distance it ever reads is L - 1 - S + W
instead of L - 1. The authors' code (HKUNLP/STRING, `string_for_llama.py`) computes it as two flash-attention
passes merged by their log-sum-exp, which is one softmax over the union of both key sets. Per (query i,
key j) with d = i - j (token indices):

- the whole sequence at once (their `string_flash_forward`): the window pass holds keys 0 <= d <= S
  (`window_size=[S, 0]`, S + 1 keys) scored with the query at position i; the shifted pass holds keys
  d >= S scored with the query at position i - S + W. The key at d = S is in both passes.
- one new token over the cache (their flash-decoding branch): the window holds the last S keys,
  0 <= d < S; the shifted pass keys d >= S. The key at d = S is in the shifted pass only.

Queries and keys are rotated with the model's RoPE tables multiplied by the attention factor a
(0.1 ln 2 + 1 in their code, which scales their cached cos and sin), so every attention logit is a² times
RoPE's, near and far.

`StringPolicy.attend` computes this as one SDPA call over the keys twice: as cached, and turned on by S - W
positions (q_i · R(S - W) k_j is the query at i - S + W against key j: RoPE's rotations compose, so every static
rope type works as the model computes it), with a mask holding the rule above and the model's attention mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from repo_train.modeling.policy import RopePolicy, Rotation, linear_positions
from repo_train.modeling.rope import RotaryEncoding, rotate_half

#: The attention factor of the authors' code: `attention_factor = 0.1 * math.log(2) + 1`, applied to cos and sin.
AUTHORS_ATTENTION_FACTOR = 0.1 * math.log(2) + 1
#: The authors' recommended shifted offset as a share of the training length L (README: int(0.33 * L)).
AUTHORS_OFFSET_SHARE = 0.33
#: Their default small_local_value W (README: 128; they suggest 128, 256 or 512).
AUTHORS_LOCAL_VALUE = 128


def allowed_keys(attention_mask: torch.Tensor | None, rows: int, keys: int, device) -> torch.Tensor | None:
    """`[B, 1, rows, keys]` bool (True = may attend) from the mask the attention interface gets, or None."""
    if attention_mask is None:
        return None
    mask = attention_mask[..., -rows:, :keys]
    return mask if mask.dtype == torch.bool else mask == 0


def string_masks(rows: int, keys: int, shifted_offset: int, decode: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """`(window, shifted)` `[rows, keys]` bool: which keys each pass holds for the last `rows` of `keys` tokens.

    d = i - j by token index (query i at index keys - rows + row). Whole sequence: window 0 <= d <= S,
    shifted d >= S; a decoding step (`decode`): window 0 <= d < S, shifted d >= S (see the module docstring).
    """
    query_index = torch.arange(keys - rows, keys, device=device)[:, None]
    distance = query_index - torch.arange(keys, device=device)[None, :]
    window = (distance >= 0) & ((distance < shifted_offset) if decode else (distance <= shifted_offset))
    return window, distance >= shifted_offset


class StringPolicy(RopePolicy):
    """RoPE with STRING's shifted far keys (see the module docstring); `attend` computes the layer's attention."""

    name = "string"
    needs_encoding = True

    def __init__(
        self,
        encoding: RotaryEncoding,
        shifted_offset: int,
        small_local_value: int,
        attention_factor: float = AUTHORS_ATTENTION_FACTOR,
    ):
        if encoding is None:
            raise ValueError("StringPolicy needs the model's encoding: RotaryEncoding.from_config(config)")
        if not 0 <= small_local_value < shifted_offset:
            raise ValueError(
                f"string: needs 0 <= small_local_value < shifted_offset, got W={small_local_value}, S={shifted_offset}"
            )
        super().__init__(encoding)
        self.shifted_offset, self.small_local_value = int(shifted_offset), int(small_local_value)
        self.attention_factor = float(attention_factor)
        shift = (self.shifted_offset - self.small_local_value) * encoding.inv_freq.double()
        #: cos/sin `[D]` of turning a key on by S - W positions (float64 angles, applied in k's dtype).
        self._ahead = torch.cat([shift.cos(), shift.cos()]), torch.cat([shift.sin(), shift.sin()])

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        factor = self.attention_factor
        if shared is not None:  # the model's own tables (HF's arithmetic), times the attention factor
            cos, sin = shared
            positions = linear_positions(position_ids) if record else None
            return Rotation(cos=cos.unsqueeze(1) * factor, sin=sin.unsqueeze(1) * factor, positions=positions)
        encoding = RotaryEncoding(self.encoding.inv_freq, self.encoding.attention_scaling * factor)
        return Rotation.from_positions(encoding, linear_positions(position_ids))

    def shifted_keys(self, key: torch.Tensor) -> torch.Tensor:
        """The rotated keys `[B, KVH, S_k, D]` turned on by S - W positions: q_i · R(S - W) k_j is the query at
        i - S + W against key j (RoPE's rotations compose), so one attention call reads both passes."""
        cos, sin = (t.to(device=key.device, dtype=key.dtype) for t in self._ahead)
        return (key * cos + rotate_half(key) * sin).to(key.dtype)

    def attend(self, attention: nn.Module, query, key, value, attention_mask):
        if getattr(attention, "attention_probe", None) is not None:
            raise ValueError(
                "string computes attention itself, so the attention probe of fim (Found in the Middle) would see "
                "nothing; evaluate string and fim separately"
            )
        rows, keys = query.shape[2], key.shape[-2]
        decode = rows == 1 and keys > 1  # one new token over a cache: the authors' decoding rule
        window, shifted = string_masks(rows, keys, self.shifted_offset, decode, query.device)
        allowed = torch.cat([window, shifted], dim=-1)  # [rows, 2·S_k]: the window keys, then the shifted ones
        given = allowed_keys(attention_mask, rows, keys, query.device)
        if given is not None:
            allowed = allowed & torch.cat([given, given], dim=-1)  # [B, 1, rows, 2·S_k]
        output = F.scaled_dot_product_attention(
            query,
            torch.cat([key, self.shifted_keys(key)], dim=-2),
            torch.cat([value, value], dim=-2),
            attn_mask=allowed,
            scale=attention.scaling,
            enable_gqa=query.shape[1] != key.shape[1],
        )
        return output.nan_to_num_(0.0).transpose(1, 2).contiguous()  # a fully masked (padding) row: zeros

    def describe(self) -> str:
        return f"{self.name}(S={self.shifted_offset}, W={self.small_local_value}, a={self.attention_factor:.4g})"
