"""OLMo-2 with a position policy per layer, on transformers' own OLMo-2 classes.

Identical to `transformers.Olmo2ForCausalLM` except that each attention layer
takes its rotation from the policy `config.position_method` assigns it, REPO
layers carry their predictor weights, and `forward(output_positions=True)`
returns the positions each layer used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import Olmo2ForCausalLM, Olmo2Model
from transformers import initialization as hf_init
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.olmo2.modeling_olmo2 import Olmo2PreTrainedModel

from repo_train.modeling.attention import install_position_policies, layer_policies, record_positions
from repo_train.modeling.configuration import RePoOlmo2Config
from repo_train.modeling.methods import build_policies
from repo_train.modeling.repo_policy import REPO_INIT_STD, PositionLinear


@dataclass
class RePoCausalLMOutput(CausalLMOutputWithPast):
    """`CausalLMOutputWithPast` plus `positions`: per layer `[B, H, S]` (None for NoPE layers)."""

    positions: tuple[torch.Tensor | None, ...] | None = None


class RePoOlmo2PreTrainedModel(Olmo2PreTrainedModel):
    config_class = RePoOlmo2Config
    config: RePoOlmo2Config

    def _init_weights(self, module):
        if isinstance(module, PositionLinear):
            hf_init.trunc_normal_(module.weight, mean=0.0, std=REPO_INIT_STD, a=-3 * REPO_INIT_STD, b=3 * REPO_INIT_STD)
            return
        super()._init_weights(module)


class RePoOlmo2Model(RePoOlmo2PreTrainedModel, Olmo2Model):
    """`Olmo2Model` whose attention layers follow the config's position policies."""

    def __init__(self, config: RePoOlmo2Config):
        Olmo2Model.__init__(self, config)
        install_position_policies(self, build_policies(config), init_new=False)
        self.post_init()  # initialises only the policy modules added above (others are marked done)


class RePoOlmo2ForCausalLM(RePoOlmo2PreTrainedModel, Olmo2ForCausalLM):
    """OLMo-2 causal LM with RoPE / NoPE / R2N1 / N2R1 / REPO position methods.

    Loads this project's checkpoints, vanilla OLMo-2 ones (REPO weights then
    freshly initialised) and the published RePo layout:
    `RePoOlmo2ForCausalLM.from_pretrained(olmo2_dir, position_method="repo")`.
    """

    def __init__(self, config: RePoOlmo2Config):
        RePoOlmo2PreTrainedModel.__init__(self, config)
        self.model = RePoOlmo2Model(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @property
    def position_policies(self):
        return layer_policies(self)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        output_positions: bool = False,
        **kwargs,
    ) -> RePoCausalLMOutput:
        """`Olmo2ForCausalLM.forward` (same explicit arguments, so `generate` sees `position_ids` and
        `logits_to_keep`), plus `output_positions`: return each layer's positions `[B, H, S]`."""
        inputs = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            labels=labels,
            use_cache=use_cache,
            logits_to_keep=logits_to_keep,
            **kwargs,
        )
        if not output_positions:
            out = Olmo2ForCausalLM.forward(self, **inputs)
            return RePoCausalLMOutput(**out) if isinstance(out, CausalLMOutputWithPast) else out
        with record_positions(self) as recorder:
            out = Olmo2ForCausalLM.forward(self, **inputs)
        if not isinstance(out, CausalLMOutputWithPast):
            return (*out, tuple(recorder.positions))
        return RePoCausalLMOutput(**out, positions=tuple(recorder.positions))
