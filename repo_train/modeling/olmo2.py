"""OLMo-2 with a position policy per layer, on transformers' own OLMo-2 classes.

Identical to `transformers.Olmo2ForCausalLM` except that each attention layer
takes its rotation from the policy `config.position_method` assigns it, REPO
layers carry their predictor weights, and `forward(output_positions=True)`
returns the positions each layer used.

`from_pretrained` is strict: a missing, unexpected or mis-shaped weight is a
`ValueError` naming the first keys (transformers would fill the gap with
random weights and only log a report). The one partial load it allows is the
documented one: a checkpoint without any REPO predictor weights (vanilla
OLMo-2, or a RoPE model of this project) loaded with an explicit
`position_method="repo"` (or `config=`) gets fresh REPO weights; a directory
whose own config says REPO must hold them. `ignore_mismatched_sizes=True`
(transformers' own opt-in) still re-initialises mis-shaped weights on purpose.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers import Olmo2ForCausalLM, Olmo2Model, PreTrainedConfig, modeling_utils
from transformers import initialization as hf_init
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.olmo2.modeling_olmo2 import Olmo2PreTrainedModel

from repo_train.modeling.attention import install_position_policies, layer_policies, record_positions
from repo_train.modeling.configuration import RePoOlmo2Config
from repo_train.modeling.methods import build_policies
from repo_train.modeling.repo_policy import REPO_INIT_STD, PositionLinear

logger = logging.getLogger(__name__)
#: Keys named in a weight-mismatch error, per kind.
SHOWN_KEYS = 3


def fresh_repo_keys(model: nn.Module) -> set[str]:
    """Names of the REPO predictor weights in `model` (what a checkpoint without REPO may lack)."""
    return {
        f"{name}.{param}" if name else param
        for name, module in model.named_modules()
        if isinstance(module, PositionLinear)
        for param, _ in module.named_parameters(recurse=False)
    }


def _natural(key: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _first(keys: Iterable[str]) -> str:
    keys = sorted(keys, key=_natural)
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (", ..." if len(keys) > SHOWN_KEYS else "")


def check_loaded_weights(
    model: nn.Module, info: dict, source: str, allow_mismatched: bool = False, allow_fresh_repo: bool = False
) -> None:
    """Refuse, in one line, a load whose weights do not fit `model` (transformers' `output_loading_info`).

    With `allow_fresh_repo` (the caller asked for REPO itself), missing keys are
    allowed when they are exactly all of the model's REPO predictor weights
    (the checkpoint has none: fresh REPO on a vanilla OLMo-2).
    """
    missing = set(info.get("missing_keys") or ())
    repo = fresh_repo_keys(model)
    fresh_repo = allow_fresh_repo and bool(repo) and repo <= missing
    if fresh_repo:
        missing -= repo
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = [] if allow_mismatched else sorted(info.get("mismatched_keys") or (), key=lambda m: _natural(m[0]))
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({_first(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({_first(unexpected)})")
    if mismatched:
        shapes = [f"{key} {list(ckpt)} in the checkpoint, {list(mine)} here" for key, ckpt, mine in mismatched]
        parts.append(
            f"{len(mismatched)} mis-shaped ({', '.join(shapes[:SHOWN_KEYS])}{', ...' * (len(shapes) > SHOWN_KEYS)})"
        )
    if parts:
        if missing and missing == repo and not unexpected and not mismatched:
            fix = "its config asks for REPO but it holds no REPO weights (to start REPO from fresh weights on "
            fix += "purpose, pass position_method='repo' to from_pretrained)"
        elif missing and missing < repo and not unexpected and not mismatched:
            fix = "its REPO weights are partial (other REPO layers than the config's?)"
        else:
            fix = "it holds another architecture or size; pass the directory of a matching model"
        raise ValueError(
            f"{source}: the checkpoint's weights do not fit {type(model).__name__} as configured: "
            f"{'; '.join(parts)}; {fix}"
        )
    if fresh_repo:
        layers = len({key.rsplit(".", 2)[0] for key in repo})
        logger.warning("%s has no REPO predictor weights: the %d REPO layers start from fresh ones", source, layers)


@contextmanager
def _quiet_load_report():
    """Hide transformers' multi-line LOAD REPORT: `check_loaded_weights` reports in one line instead.

    transformers checks a tensor-parallel plan exactly when its loader's log
    level is WARNING or above (ERROR here), and warns "The following layers
    were not sharded" for every model with a plan, also when nothing is
    sharded: that logger is quieted for the load too.
    """
    loggers = [modeling_utils.logger, logging.getLogger("transformers.distributed.tensor_parallel")]
    levels = [hf_logger.level for hf_logger in loggers]
    for hf_logger in loggers:
        hf_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for hf_logger, level in zip(loggers, levels):
            hf_logger.setLevel(level)


def load_checked(load: Callable, source, *args, allow_fresh_repo: bool = False, **kwargs):
    """`load(source, ...)` (a `from_pretrained`), then `check_loaded_weights`; the model (and info if asked).

    `ignore_mismatched_sizes=True` from the caller keeps its transformers
    meaning (mis-shaped weights re-initialised on purpose); without it,
    mis-shaped weights are an error like missing ones.
    """
    allow_mismatched = bool(kwargs.pop("ignore_mismatched_sizes", False))
    want_info = kwargs.pop("output_loading_info", False)
    with _quiet_load_report():
        model, info = load(source, *args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
    check_loaded_weights(model, info, str(source), allow_mismatched, allow_fresh_repo)
    return (model, info) if want_info else model


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
    Anything else is refused (see the module doc).
    """

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """transformers' `from_pretrained`, strict about weights (see the module doc)."""
        asked = "position_method" in kwargs or isinstance(kwargs.get("config"), PreTrainedConfig)  # caller's choice
        load = super().from_pretrained
        return load_checked(load, pretrained_model_name_or_path, *model_args, allow_fresh_repo=asked, **kwargs)

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
