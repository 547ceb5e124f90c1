"""Parameter and FLOP counts, with what position policies learn (REPO's matrices) counted separately.

Used by the demo, the benchmark and the trainer's MFU logging. Parameter
counts are exact: they come from a model built on the meta device, so even the
7B shape costs no memory. Each layer's policy states its own FLOPs, so any
registered policy is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repo_train.modeling.attention import policy_modules
from repo_train.modeling.methods import build_policies
from repo_train.modeling.olmo2 import RePoOlmo2ForCausalLM


@dataclass
class ParameterReport:
    total: int
    position: int  # parameters the position policies learn (REPO's W_g, W_c, w_z)

    @property
    def base(self) -> int:
        return self.total - self.position

    @property
    def overhead_percent(self) -> float:
        return 100.0 * self.position / self.base if self.base else 0.0

    def __str__(self) -> str:
        return (
            f"{self.total:,} parameters ({self.base:,} base + {self.position:,} position predictor, "
            f"+{self.overhead_percent:.3f}%)"
        )


def parameter_report(model: torch.nn.Module) -> ParameterReport:
    position = sum(p.numel() for m in policy_modules(model).values() for p in m.parameters())
    return ParameterReport(total=sum(p.numel() for p in model.parameters()), position=position)


def config_parameter_report(config) -> ParameterReport:
    """Exact counts for a config without allocating its weights."""
    with torch.device("meta"):
        model = RePoOlmo2ForCausalLM(config)
    return parameter_report(model)


def training_flops_per_token(config, seq_len: int) -> float:
    """Model FLOPs of one training token (forward + backward = 3 × forward).

    Matmuls: 2 FLOPs per multiply-add over every weight used per token
    (embeddings excluded, LM head included), plus attention scores and values
    (2 · 2 · seq_len · d per layer, halved for the causal mask), plus what each
    layer's position policy adds (`PositionPolicy.training_flops_per_token`:
    REPO's predictor 3 · 2 · (2 · d · d_p + d_p · H) on its layers).
    """
    d, layers, ffn = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = d // heads
    qkvo = d * heads * head_dim * 2 + d * kv_heads * head_dim * 2
    per_layer = 2 * (qkvo + 3 * d * ffn) + 2 * seq_len * d  # causal: half of 4·S·d
    forward = layers * per_layer + 2 * d * config.vocab_size
    policies = sum(policy.training_flops_per_token(seq_len) for policy in build_policies(config))
    return 3.0 * forward + policies
