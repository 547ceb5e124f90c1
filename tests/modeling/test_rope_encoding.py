"""RoPE encodings: HF's tables reproduced, and the hand-written rotation backward checked."""

import math

import pytest
import torch
from float_checks import assert_close_to_scale
from transformers import Olmo2Config
from transformers.models.olmo2.modeling_olmo2 import Olmo2RotaryEmbedding

from repo_train.modeling.rope import RotaryEncoding, apply_rotation, rotate_by_angles


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
    cos, sin = ours.cos_sin(positions)
    assert torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin)
    if rope_parameters["rope_type"] == "yarn":
        assert ours.attention_scaling > 1.0  # YaRN's mscale is carried over


def test_default_frequencies_follow_the_rope_formula():
    enc = RotaryEncoding.from_config(_config({"rope_type": "default", "rope_theta": 10000.0}))
    expected = torch.tensor([10000.0 ** (-2 * j / 16) for j in range(8)])
    assert torch.allclose(enc.inv_freq, expected, rtol=1e-6)


@pytest.mark.parametrize("heads_in_angles", [1, 3])
@pytest.mark.parametrize("scale", [1.0, 1.3])
def test_rotate_by_angles_forward_and_gradients(heads_in_angles, scale):
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    angles = torch.randn(2, heads_in_angles, 5, 4, dtype=torch.float64, requires_grad=True)
    # Reference: pairs (j, j+4) rotated by the angle, written out.
    a, b = x[..., :4], x[..., 4:]
    expected = scale * torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1)
    assert torch.allclose(rotate_by_angles(x, angles, scale), expected)
    cos = torch.cat([angles.cos()] * 2, -1) * scale
    sin = torch.cat([angles.sin()] * 2, -1) * scale
    assert torch.allclose(apply_rotation(x, cos, sin), expected)
    assert torch.autograd.gradcheck(lambda x_, a_: rotate_by_angles(x_, a_, scale), (x, angles))


def test_rotation_preserves_norm_and_relative_position():
    enc = RotaryEncoding.from_config(_config({"rope_type": "default", "rope_theta": 10000.0}))
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(pq, pk):
        rq = rotate_by_angles(q, enc.angles(torch.tensor([[[pq]]])))
        rk = rotate_by_angles(k, enc.angles(torch.tensor([[[pk]]])))
        return (rq * rk).sum().item(), rq.norm().item()

    s1, n1 = score(3.25, 10.0)
    s2, _ = score(103.25, 110.0)  # same offset, both shifted: same score (RoPE is relative)
    # scale |q||k|: float32 angles near position 110 carry rounding errors of up to ~4e-6 rad (half an ulp of
    # 110), which move the score by about that fraction of |q||k|, whatever the score itself is (it could be
    # near 0). Measured: 1.5e-7 of |q||k|, with 1 and 2 threads.
    assert_close_to_scale(s2, s1, 1e-5, scale=(q.norm() * k.norm()).item(), what="score")
    assert math.isclose(n1, q.norm().item(), rel_tol=1e-5)
