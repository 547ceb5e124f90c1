"""Parameter and FLOP counts, with REPO's extra matrices counted separately.

Used by the demo, the benchmark and (later) the trainer's MFU logging. Counts
are exact: they come from a model built on the meta device, so even the 7B
shape costs no memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from repo_train.modeling.repo_policy import PositionLinear


@dataclass
class ParameterReport:
    total: int
    position: int  # parameters of learned position predictors (REPO's W_g, W_c, w_z)

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
    position = sum(p.numel() for m in model.modules() if isinstance(m, PositionLinear) for p in m.parameters())
    return ParameterReport(total=sum(p.numel() for p in model.parameters()), position=position)


def config_parameter_report(config) -> ParameterReport:
    """Exact counts for a config without allocating its weights."""
    from repo_train.modeling.olmo2 import RePoOlmo2ForCausalLM

    with torch.device("meta"):
        model = RePoOlmo2ForCausalLM(config)
    return parameter_report(model)


def training_flops_per_token(config, seq_len: int) -> float:
    """Model FLOPs of one training token (forward + backward = 3 × forward).

    Matmuls: 2 FLOPs per multiply-add over every weight used per token
    (embeddings excluded, LM head included), plus attention scores and values
    (2 · 2 · seq_len · d per layer, halved for the causal mask), plus REPO's
    predictor on its layers.
    """
    d, layers, ffn = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = d // heads
    qkvo = d * heads * head_dim * 2 + d * kv_heads * head_dim * 2
    per_layer = 2 * (qkvo + 3 * d * ffn) + 2 * seq_len * d  # causal: half of 4·S·d
    from repo_train.modeling.methods import layer_plan

    plan = layer_plan(config.position_method, layers, config.repo_start_layer)
    d_p = config.repo_hidden_size
    repo_layers = sum(name == "repo" for name in plan)
    predictor = 2 * (2 * d * d_p + d_p * heads)
    forward = layers * per_layer + repo_layers * predictor + 2 * d * config.vocab_size
    return 3.0 * forward
