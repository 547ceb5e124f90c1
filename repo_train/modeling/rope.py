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


class _RotateByAngle(torch.autograd.Function):
    """Rotate the pairs (j, j + D/2) of x by per-element angles, times a scale.

    Same result as `apply_rotation` with cos/sin of the angles, but with a
    hand-written backward: the gradient w.r.t. the angles is
    `g2·out1 − g1·out2` and w.r.t. x a rotation by the opposite angle, which
    saves autograd's chain through cat/cos/sin. Learned positions (REPO) need
    that angle gradient at every training step. Memory: it keeps the output
    (which attention keeps anyway) and the angles (shared by q and k), and
    recomputes cos/sin in backward instead of storing them.
    """

    @staticmethod
    def forward(ctx, x, angles, scale: float):
        cos, sin = angles.cos(), angles.sin()
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)
        ctx.save_for_backward(out, angles)
        ctx.scale = scale
        ctx.needs_angle_grad = ctx.needs_input_grad[1]
        return out

    @staticmethod
    def backward(ctx, grad):
        out, angles = ctx.saved_tensors
        cos, sin = angles.cos(), angles.sin()
        if ctx.scale != 1.0:
            cos, sin = cos * ctx.scale, sin * ctx.scale
        half = grad.shape[-1] // 2
        g1, g2 = grad[..., :half], grad[..., half:]
        grad_x = torch.cat((g1 * cos + g2 * sin, g2 * cos - g1 * sin), dim=-1).to(grad.dtype)
        grad_angles = None
        if ctx.needs_angle_grad:
            o1, o2 = out[..., :half].float(), out[..., half:].float()
            grad_angles = (g2.float() * o1 - g1.float() * o2).sum_to_size(angles.shape)
        return grad_x, grad_angles, None


def rotate_by_angles(x: torch.Tensor, angles: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """`x [B, H, S, D]` rotated by `angles [B, 1 or H, S, D/2]` (float32), times `scale`."""
    return _RotateByAngle.apply(x, angles, scale)


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

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """`positions [..., S]` -> rotation angles `[..., S, head_dim / 2]` (float32)."""
        inv_freq = self.inv_freq.to(device=positions.device, dtype=torch.float32)
        return positions.float()[..., None] * inv_freq

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype = torch.float32):
        """`positions [..., S]` (any float/int dtype) -> `cos, sin [..., S, head_dim]`.

        Computed in float32 (bf16 cannot represent positions beyond 256
        exactly), the same arithmetic as HF's rotary module, so integer
        positions give bit-identical rotations.
        """
        inv_freq = self.inv_freq.to(device=positions.device, dtype=torch.float32)
        freqs = positions.float()[..., None] * inv_freq
        # cos/sin on the D/2 distinct angles, then duplicated: half the transcendental work of cat-first.
        cos, sin = freqs.cos(), freqs.sin()
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return torch.cat((cos, cos), dim=-1).to(dtype), torch.cat((sin, sin), dim=-1).to(dtype)
