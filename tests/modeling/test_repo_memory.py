"""What REPO keeps for backward beyond RoPE: its predictor's activations and nothing per angle.

Measured with the benchmark's allocation trace (torch.profiler, CPU allocator) at a small shape, against the
count of the tensors REPO's layers add: that count is the estimate for larger shapes, and a rotation that kept
its `[B, H, S, D/2]` angles (or cos/sin tables) would add B·H·S·D/2 floats per layer and fail here.
"""

import torch
from torch.profiler import record_function

from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.benchmarking import trace_allocations

FLOAT32_BYTES = 4


def held_for_backward(model, ids) -> int:
    """Bytes allocated by the forward of a training step and still held when backward starts."""

    def step():
        loss = model(ids, labels=ids, use_cache=False).loss
        with record_function("backward"):
            loss.backward()

    return trace_allocations(step).before("backward")


def repo_extra_bytes(config, tokens: int) -> int:
    """Per REPO layer: h·[W_g; W_c] (2·d_p), SiLU of the gate (d_p), r (d_p) and z (H) per token, plus [W_g; W_c]."""
    d, d_p, heads = config.hidden_size, config.repo_hidden_size, config.num_attention_heads
    per_layer = tokens * (4 * d_p + heads) + 2 * d_p * d
    return (config.num_hidden_layers - config.repo_start_layer) * per_layer * FLOAT32_BYTES


def test_repo_keeps_only_its_predictor_activations_beyond_rope():
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, vocab_size=256)
    ids = torch.randint(2, 256, (2, 48))
    held = {}
    for method in ("rope", "repo"):
        torch.manual_seed(0)
        model = RePoOlmo2ForCausalLM(tiny(position_method=method, **shape)).train()
        held[method] = held_for_backward(model, ids)
    config = tiny(position_method="repo", **shape)
    assert held["repo"] - held["rope"] == repo_extra_bytes(config, ids.numel())
