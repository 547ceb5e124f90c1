"""RoPE encodings: HF's tables reproduced, and the hand-written rotation of q and k (forward, backward) checked."""

import math

import pytest
import torch
from float_checks import assert_close_to_scale
from transformers import Olmo2Config
from transformers.models.olmo2.modeling_olmo2 import Olmo2RotaryEmbedding

from repo_train.modeling.rope import (
    RotaryEncoding,
    _scaled_cos_sin,
    apply_rotation,
    default_inv_freq,
    rotate_by_positions,
)


def _config(rope_parameters):
    return Olmo2Config(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, rope_parameters=rope_parameters)


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "default", "rope_theta": 500000.0},
        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 128},
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    ],
)
def test_tables_equal_hf_rotary_module(rope_parameters):
    config = _config(rope_parameters)
    hf = Olmo2RotaryEmbedding(config)
    positions = torch.arange(300)[None]
    hf_cos, hf_sin = hf(torch.zeros(1, dtype=torch.float32), positions)
    ours = RotaryEncoding.from_config(config)
    # the half tables the rotation uses (pairs j, j + D/2 share an angle), duplicated as HF lays them out
    cos, sin = _scaled_cos_sin(positions, ours.inv_freq, ours.attention_scaling, torch.float32)
    assert torch.equal(torch.cat((cos, cos), -1), hf_cos) and torch.equal(torch.cat((sin, sin), -1), hf_sin)
    if rope_parameters["rope_type"] == "yarn":
        assert ours.attention_scaling > 1.0  # YaRN's mscale is carried over


def test_default_frequencies_follow_the_rope_formula():
    enc = RotaryEncoding.from_config(_config({"rope_type": "default", "rope_theta": 10000.0}))
    expected = torch.tensor([10000.0 ** (-2 * j / 16) for j in range(8)])
    assert torch.allclose(enc.inv_freq, expected, rtol=1e-6)


def _reference_rotation(x, positions, inv_freq, scale):
    """Pairs (j, j + D/2) of `x` rotated by positions · θ_j, written out (float64)."""
    angles = positions.double()[..., None] * inv_freq.double()
    a, b = x[..., : x.shape[-1] // 2].double(), x[..., x.shape[-1] // 2 :].double()
    return scale * torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)


# (query heads, key heads, heads in the positions): per-head positions (REPO), shared positions with MHA keys,
# shared positions with GQA keys (LPES / scaled RoPE on a GQA model).
HEAD_LAYOUTS = [(3, 3, 3), (3, 3, 1), (4, 2, 1)]


@pytest.mark.parametrize("heads", HEAD_LAYOUTS)
@pytest.mark.parametrize("scale", [1.0, 1.3])
def test_rotate_by_positions_forward_and_gradients(heads, scale):
    query_heads, key_heads, position_heads = heads
    inv_freq = default_inv_freq(10000.0, 8).double()
    # q and k as attention gets them: transposed views of [B, S, H, D].
    query = torch.randn(2, 5, query_heads, 8, dtype=torch.float64).transpose(1, 2).requires_grad_()
    key = torch.randn(2, 5, key_heads, 8, dtype=torch.float64).transpose(1, 2).requires_grad_()
    positions = (50 * torch.randn(2, position_heads, 5, dtype=torch.float64)).requires_grad_()
    rotated_query, rotated_key = rotate_by_positions(query, key, positions, inv_freq, scale)
    assert torch.allclose(rotated_query, _reference_rotation(query, positions, inv_freq, scale))
    assert torch.allclose(rotated_key, _reference_rotation(key, positions, inv_freq, scale))
    assert rotated_query.stride() == query.stride()  # the [B, S, H, D] memory layout is kept
    cos = torch.cat([(positions[..., None] * inv_freq).cos()] * 2, -1) * scale
    sin = torch.cat([(positions[..., None] * inv_freq).sin()] * 2, -1) * scale
    assert torch.allclose(apply_rotation(query, cos, sin), rotated_query)
    assert torch.autograd.gradcheck(
        lambda q, k, p: rotate_by_positions(q, k, p, inv_freq, scale), (query, key, positions)
    )


def test_rotate_by_positions_without_position_gradient():
    """Fixed positions (RoPE with its own encoding, LPES): only q and k get gradients."""
    inv_freq = default_inv_freq(10000.0, 8).double()
    query = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    key = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(4, dtype=torch.float64)[None, None] * 0.5
    assert torch.autograd.gradcheck(lambda q, k: rotate_by_positions(q, k, positions, inv_freq), (query, key))


def test_rotate_by_positions_keeps_bf16_and_float32_angles():
    """bf16 q/k stay bf16 (tables in q's dtype, as HF's rotary module); the angles stay float32.

    Against the float32 rotation, scale max |x|: bf16 rounds the inputs, the tables and the output (2^-9
    relative each); measured max |Δ| / max |x| = 3.6e-3 (query), 2.7e-3 (key). A position rounded to bf16
    (1001 -> 1000) would turn the fastest pair by a full radian: max |Δ| / max |x| of order 1.
    """
    inv_freq = default_inv_freq(10000.0, 16)
    query, key = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    positions = torch.tensor([1000.0, 1001.0, 1002.0, 1003.0, 1004.0, 1005.0]).expand(1, 2, 6)
    exact_query, exact_key = rotate_by_positions(query, key, positions, inv_freq)
    low_query, low_key = rotate_by_positions(query.bfloat16(), key.bfloat16(), positions, inv_freq)
    assert low_query.dtype == low_key.dtype == torch.bfloat16
    assert_close_to_scale(low_query, exact_query, 4e-2, scale=query.abs().max().item(), what="bf16 query")
    assert_close_to_scale(low_key, exact_key, 4e-2, scale=key.abs().max().item(), what="bf16 key")


def test_rotation_preserves_norm_and_relative_position():
    enc = RotaryEncoding.from_config(_config({"rope_type": "default", "rope_theta": 10000.0}))
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(pq, pk):
        rq, _ = enc.rotate(q, q, torch.tensor([[[pq]]]))
        _, rk = enc.rotate(k, k, torch.tensor([[[pk]]]))
        return (rq * rk).sum().item(), rq.norm().item()

    s1, n1 = score(3.25, 10.0)
    s2, _ = score(103.25, 110.0)  # same offset, both shifted: same score (RoPE is relative)
    # scale |q||k|: float32 angles near position 110 carry rounding errors of up to ~4e-6 rad (half an ulp of
    # 110), which move the score by about that fraction of |q||k|, whatever the score itself is (it could be
    # near 0). Measured: 1.5e-7 of |q||k|, with 1 and 2 threads.
    assert_close_to_scale(s2, s1, 1e-5, scale=(q.norm() * k.norm()).item(), what="score")
    assert math.isclose(n1, q.norm().item(), rel_tol=1e-5)
