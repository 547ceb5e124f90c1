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
RoPE's, near and far. The shifted query is the rotated query turned back by S - W positions (RoPE's
rotations compose), so every static rope type works as the model computes it.

`StringPolicy.attend` computes this in plain torch, a block of query rows at a time: two score matrices
against the same keys, masked by the rule above and by the model's attention mask, one softmax over both.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from repo_train.modeling.policy import RopePolicy, Rotation, linear_positions
from repo_train.modeling.rope import RotaryEncoding, rotate_half

#: The attention factor of the authors' code: `attention_factor = 0.1 * math.log(2) + 1`, applied to cos and sin.
AUTHORS_ATTENTION_FACTOR = 0.1 * math.log(2) + 1
#: The authors' recommended shifted offset as a share of the training length L (README: int(0.33 * L)).
AUTHORS_OFFSET_SHARE = 0.33
#: Their default small_local_value W (README: 128; they suggest 128, 256 or 512).
AUTHORS_LOCAL_VALUE = 128
#: Query rows per block in `attend`: bounds the [B, H, rows, 2·S_k] scores a long prompt's prefill holds.
QUERY_BLOCK = 512


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
        shift = -(self.shifted_offset - self.small_local_value) * encoding.inv_freq.double()
        #: cos/sin `[D]` of turning a query back by S - W positions (float64 angles, applied in q's dtype).
        self._back = torch.cat([shift.cos(), shift.cos()]), torch.cat([shift.sin(), shift.sin()])

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        factor = self.attention_factor
        if shared is not None:  # the model's own tables (HF's arithmetic), times the attention factor
            cos, sin = shared
            positions = linear_positions(position_ids) if record else None
            return Rotation(cos=cos.unsqueeze(1) * factor, sin=sin.unsqueeze(1) * factor, positions=positions)
        encoding = RotaryEncoding(self.encoding.inv_freq, self.encoding.attention_scaling * factor)
        return Rotation.from_positions(encoding, linear_positions(position_ids))

    def shifted_query(self, query: torch.Tensor) -> torch.Tensor:
        """The rotated query `[B, H, S_q, D]` turned back by S - W positions: the query at position i - S + W."""
        cos, sin = (t.to(device=query.device, dtype=query.dtype) for t in self._back)
        return (query * cos + rotate_half(query) * sin).to(query.dtype)

    def attend(self, attention: nn.Module, query, key, value, attention_mask):
        if getattr(attention, "attention_probe", None) is not None:
            raise ValueError(
                "string computes attention itself, so the attention probe of fim (Found in the Middle) would see "
                "nothing; evaluate string and fim separately"
            )
        heads, rows = query.shape[1], query.shape[2]
        keys, key_heads = key.shape[-2], key.shape[1]
        decode = rows == 1 and keys > 1  # one new token over a cache: the authors' decoding rule
        window, shifted = string_masks(rows, keys, self.shifted_offset, decode, query.device)
        allowed = allowed_keys(attention_mask, rows, keys, query.device)
        groups = heads // key_heads
        out = []
        for start in range(0, rows, QUERY_BLOCK):
            block = slice(start, start + QUERY_BLOCK)
            near = query[:, :, block]
            far = self.shifted_query(near)
            block_allowed = None if allowed is None else allowed[:, :, block]
            out.append(
                _two_pass_attention(
                    near, far, key, value, window[block], shifted[block], block_allowed, attention.scaling, groups
                )
            )
        return torch.cat(out, dim=1) if len(out) > 1 else out[0]

    def describe(self) -> str:
        return f"{self.name}(S={self.shifted_offset}, W={self.small_local_value}, a={self.attention_factor:.4g})"


def _two_pass_attention(near, far, key, value, window, shifted, allowed, scaling: float, groups: int):
    """Softmax over [window keys scored by `near`, shifted keys scored by `far`]; output `[B, rows, H, D]`.

    `near`, `far` `[B, H, rows, D]`; `key`, `value` `[B, KVH, S_k, D]` (query head h reads key head h // groups,
    as HF's `repeat_kv`); `window`, `shifted` `[rows, S_k]`; `allowed` `[B, 1, rows, S_k]` or None.
    """
    batch, heads, rows, dim = near.shape
    key_heads = key.shape[1]

    def scores(query):  # [B, KVH, groups, rows, S_k], float32 as eager attention's softmax
        grouped = query.reshape(batch, key_heads, groups * rows, dim)
        return (grouped @ key.transpose(-1, -2)).float().mul_(scaling).view(batch, key_heads, groups, rows, -1)

    masks = [window, shifted]
    if allowed is not None:
        masks = [m[None, None] & allowed for m in masks]  # [B, 1, rows, S_k]
    masks = [m.unsqueeze(1) if m.dim() == 4 else m for m in masks]  # broadcast over (KVH, groups)
    logits = torch.cat(
        [scores(near).masked_fill(~masks[0], -math.inf), scores(far).masked_fill(~masks[1], -math.inf)], -1
    )
    weights = logits.softmax(dim=-1).nan_to_num_(0.0).to(value.dtype)  # a fully masked (padding) row: zeros
    keys = key.shape[-2]
    combined = weights[..., :keys] + weights[..., keys:]  # both passes read the same values
    output = combined.view(batch, key_heads, groups * rows, keys) @ value
    return output.view(batch, heads, rows, dim).transpose(1, 2).contiguous()
