"""Position encoding: real-valued positions -> RoPE rotations.

Step (2) of the design: how positions become `cos/sin`. The inverse
frequencies come from transformers' own `ROPE_INIT_FUNCTIONS` registry, so
every static rope type HF knows (default, linear, yarn, llama3, ...) is
available, including YaRN's attention scaling. Positions may be fractional
(REPO, LPES) and may differ per head (REPO, Ms-PoE): they arrive as
`[batch, P, seq]` with `P` either 1 (shared by all heads) or the head count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

# Rope types whose frequencies change with the sequence seen at run time. A
# layer that computes its own rotation cannot follow them, so they are refused
# there (the untouched RoPE layers still use the model's own rotary module).
_RUNTIME_DEPENDENT_ROPE_TYPES = {"dynamic", "longrope"}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Split the last dim in halves (a, b) and return (-b, a): RoPE's pairing."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x [B, H, S, D]` by `cos/sin [B, 1 or H, S, D]`; result in x's dtype."""
    return ((x * cos) + (rotate_half(x) * sin)).to(x.dtype)


def default_inv_freq(base: float, dim: int) -> torch.Tensor:
    """theta_j = base^(-2j/d), the original RoPE frequencies (float32)."""
    # Explicit CPU device: models are often built under a meta-device context.
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))


def _angle_dtype(positions: torch.Tensor) -> torch.dtype:
    """float32, or float64 for float64 positions: bf16/fp16 cannot hold positions beyond 256 exactly."""
    return torch.promote_types(positions.dtype, torch.float32)


def _scaled_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, scale: float, dtype: torch.dtype):
    """cos/sin `[..., S, D/2]` of the angles `positions · inv_freq`, times `scale`, cast to `dtype` at the end.

    The angles are float32 (float64 for float64 positions); the tables take
    q's dtype, as in HF's rotary module.
    """
    angle_dtype = _angle_dtype(positions)
    angles = positions.to(angle_dtype)[..., None] * inv_freq.to(angle_dtype)
    cos, sin = angles.cos(), angles.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype), sin.to(dtype)


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate the pairs (j, j + D/2) of `x [..., D]` by the angles of `cos/sin [..., D/2]` (by minus them if `inverse`).

    Writes both halves into one output laid out like `x` (no cat): q and k
    arrive as transposed views of `[B, S, H, D]`, and attention reads them in
    that layout. Rounds as HF's `apply_rotary_pos_emb` does (two products,
    then their sum; no fused multiply-add), so integer positions reproduce
    RoPE bit for bit.
    """
    half = x.shape[-1] // 2
    if torch.compiler.is_compiling():  # `out=` into halves breaks the graph; the compiler picks the layout itself
        x1, x2 = x[..., :half], x[..., half:]
        if inverse:
            return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    out = torch.empty_like(x)
    x1, x2, out1, out2 = x[..., :half], x[..., half:], out[..., :half], out[..., half:]
    if inverse:
        torch.mul(x1, cos, out=out1).add_(x2 * sin)
        torch.mul(x2, cos, out=out2).sub_(x1 * sin)
    else:
        torch.mul(x1, cos, out=out1).sub_(x2 * sin)
        torch.mul(x2, cos, out=out2).add_(x1 * sin)
    return out


def _angle_gradient(grad: torch.Tensor, out: torch.Tensor, dtype: torch.dtype, into: torch.Tensor | None = None):
    """`g2·out1 − g1·out2` `[..., D/2]` in `dtype`: the gradient w.r.t. each pair's angle; added to `into` if given."""
    half = grad.shape[-1] // 2
    g1, g2 = grad[..., :half].to(dtype), grad[..., half:].to(dtype)
    out1, out2 = out[..., :half], out[..., half:]
    if into is None:
        return (g2 * out1).addcmul_(g1, out2, value=-1)
    return into.addcmul_(g2, out1).addcmul_(g1, out2, value=-1)


class _RotateByPositions(torch.autograd.Function):
    """Rotate q and k by the angles `positions · inv_freq` (times a scale), with one cos/sin table for both.

    Same result as `apply_rotation` with the cos/sin tables of those positions,
    but cos/sin are computed once per call for q and k together, the
    `[B, H, S, D/2]` angles are never kept (backward recomputes cos/sin from
    the `[B, P, S]` positions), and the backward is written by hand: the
    gradient w.r.t. a pair's angle is `g2·out1 − g1·out2`, w.r.t. a position
    the sum of those times θ_j, and w.r.t. x a rotation by minus the angle.
    That saves autograd's chain through cat/cos/sin; learned positions (REPO)
    need the position gradient at every training step. Memory: it keeps the
    outputs (which attention keeps anyway) and the positions.
    """

    @staticmethod
    def forward(ctx, query, key, positions, inv_freq, scale: float):
        cos, sin = _scaled_cos_sin(positions, inv_freq, scale, query.dtype)
        rotated_query, rotated_key = _rotate_pairs(query, cos, sin), _rotate_pairs(key, cos, sin)
        ctx.save_for_backward(rotated_query, rotated_key, positions, inv_freq)
        ctx.scale = scale
        return rotated_query, rotated_key

    @staticmethod
    def backward(ctx, grad_query, grad_key):
        rotated_query, rotated_key, positions, inv_freq = ctx.saved_tensors
        grad_positions = None
        if ctx.needs_input_grad[2]:
            dtype = _angle_dtype(positions)
            per_angle = _angle_gradient(grad_query, rotated_query, dtype)
            if grad_key.shape == grad_query.shape:  # MHA or per-head keys: one accumulator
                _angle_gradient(grad_key, rotated_key, dtype, into=per_angle)
            else:  # GQA keys with shared positions: reduce each to the positions' heads first
                angle_shape = (*positions.shape, inv_freq.shape[0])
                key_part = _angle_gradient(grad_key, rotated_key, dtype).sum_to_size(angle_shape)
                per_angle = per_angle.sum_to_size(angle_shape) + key_part
            grad_positions = (per_angle * inv_freq.to(dtype)).sum(-1).sum_to_size(positions.shape)
        cos, sin = _scaled_cos_sin(positions, inv_freq, ctx.scale, grad_query.dtype)
        grad_query = _rotate_pairs(grad_query, cos, sin, inverse=True) if ctx.needs_input_grad[0] else None
        grad_key = _rotate_pairs(grad_key, cos, sin, inverse=True) if ctx.needs_input_grad[1] else None
        return grad_query, grad_key, grad_positions, None, None


def rotate_by_positions(
    query: torch.Tensor, key: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """`query [B, H, S, D]` and `key [B, H or KVH, S, D]` rotated by `positions [B, 1 or H, S]` · `inv_freq [D/2]`.

    Both results are multiplied by `scale` (YaRN) and keep their input's dtype
    and layout; the angles are float32 (float64 for float64 positions).
    """
    return _RotateByPositions.apply(query, key, positions, inv_freq, scale)


@dataclass
class RotaryEncoding:
    """Frequencies and output scale of one RoPE variant.

    Stateless apart from the tensors: `inv_freq [head_dim/2]` (float32) and the
    post-scaling YaRN applies to cos/sin (1.0 for plain RoPE).
    """

    inv_freq: torch.Tensor
    attention_scaling: float = 1.0

    @classmethod
    def from_config(cls, config) -> RotaryEncoding:
        """The encoding a HF config asks for (`rope_parameters`, e.g. YaRN)."""
        params = getattr(config, "rope_parameters", None) or {}
        rope_type = params.get("rope_type", "default")
        if rope_type in _RUNTIME_DEPENDENT_ROPE_TYPES:
            raise ValueError(
                f"rope_type={rope_type!r} changes its frequencies with the input length, which a "
                "layer with its own position policy cannot follow. Use a static type "
                "('default', 'linear', 'yarn', 'llama3') for models with position policies."
            )
        if rope_type == "default":
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            return cls(default_inv_freq(float(params["rope_theta"]), head_dim), 1.0)
        if rope_type not in ROPE_INIT_FUNCTIONS:
            raise ValueError(f"Unknown rope_type {rope_type!r}; transformers knows {sorted(ROPE_INIT_FUNCTIONS)}.")
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device=torch.device("cpu"))
        return cls(inv_freq.float(), float(scaling))

    def rotate(self, query: torch.Tensor, key: torch.Tensor, positions: torch.Tensor):
        """q and k rotated by real-valued `positions [B, 1 or H, S]` (`rotate_by_positions`), with YaRN's scale."""
        inv_freq = self.inv_freq.to(device=positions.device)
        return rotate_by_positions(query, key, positions, inv_freq, self.attention_scaling)
