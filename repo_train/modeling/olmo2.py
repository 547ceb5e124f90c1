"""OLMo-2 with a position policy per layer, on transformers' own OLMo-2 classes.

Identical to `transformers.Olmo2ForCausalLM` except that each attention layer
takes its rotation from the policy `config.position_method` assigns it, layers
of a trainable policy (REPO) carry its weights, started by the policy's own
`init_learned`, and `forward(output_positions=True)` returns the positions
each layer used.

`from_pretrained` is strict: a missing, unexpected or mis-shaped weight is a
`ValueError` naming the first keys (transformers would fill the gap with
random weights and only log a report). The one partial load it allows is the
documented one: a checkpoint without any REPO predictor weights (vanilla
OLMo-2, or a RoPE model of this project) loaded with an explicit
`position_method="repo"` (or `config=`) gets fresh REPO weights; a directory
whose own config says REPO must hold them. The same holds for any trainable
policy's weights. `ignore_mismatched_sizes=True`
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
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    Olmo2ForCausalLM,
    Olmo2Model,
    PreTrainedConfig,
    modeling_utils,
)
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.olmo2.modeling_olmo2 import Olmo2PreTrainedModel

from repo_train.modeling.attention import (
    init_policy_module,
    install_position_policies,
    layer_policies,
    policy_modules,
    record_positions,
)
from repo_train.modeling.cache_keyword import cache_argument, given_cache
from repo_train.modeling.configuration import RePoOlmo2Config
from repo_train.modeling.methods import build_policies

logger = logging.getLogger(__name__)
#: Keys named in a weight-mismatch error, per kind.
SHOWN_KEYS = 3


def learned_policy_keys(model: nn.Module) -> set[str]:
    """Names of the weights position policies learn in `model` (REPO's predictors: what a vanilla checkpoint lacks)."""
    return {
        f"{name}.{param}" if name else param
        for name, module in policy_modules(model).items()
        for param, _ in module.named_parameters()
    }


def _natural(key: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key)]


def _first(keys: Iterable[str]) -> str:
    keys = sorted(keys, key=_natural)
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (", ..." if len(keys) > SHOWN_KEYS else "")


def check_loaded_weights(
    model: nn.Module, info: dict, source: str, allow_mismatched: bool = False, allow_fresh_policy: bool = False
) -> None:
    """Refuse, in one line, a load whose weights do not fit `model` (transformers' `output_loading_info`).

    With `allow_fresh_policy` (the caller asked for the position method
    itself), missing keys are allowed when they are exactly all the weights
    the model's position policies learn (the checkpoint has none: fresh REPO on
    a vanilla OLMo-2).
    """
    missing = set(info.get("missing_keys") or ())
    learned = learned_policy_keys(model)
    fresh = allow_fresh_policy and bool(learned) and learned <= missing
    if fresh:
        missing -= learned
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
    method = getattr(model.config, "position_method", None) or "repo"
    label = method.upper()
    if parts:
        if missing and missing == learned and not unexpected and not mismatched:
            fix = f"its config asks for {label} but it holds no {label} weights (to start {label} from fresh weights "
            fix += f"on purpose, pass position_method='{method}' to from_pretrained)"
        elif missing and missing < learned and not unexpected and not mismatched:
            fix = f"its {label} weights are partial (other {label} layers than the config's?)"
        else:
            fix = "it holds another architecture or size; pass the directory of a matching model"
        raise ValueError(
            f"{source}: the checkpoint's weights do not fit {type(model).__name__} as configured: "
            f"{'; '.join(parts)}; {fix}"
        )
    if fresh:
        layers = len({key.split(".self_attn.")[0] for key in learned})
        logger.warning("%s has no %s weights: the %d %s layers start from fresh ones", source, label, layers, label)


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


def load_checked(load: Callable, source, *args, allow_fresh_policy: bool = False, **kwargs):
    """`load(source, ...)` (a `from_pretrained`), then `check_loaded_weights`; the model (and info if asked).

    `ignore_mismatched_sizes=True` from the caller keeps its transformers
    meaning (mis-shaped weights re-initialised on purpose); without it,
    mis-shaped weights are an error like missing ones.
    """
    allow_mismatched = bool(kwargs.pop("ignore_mismatched_sizes", False))
    want_info = kwargs.pop("output_loading_info", False)
    with _quiet_load_report():
        model, info = load(source, *args, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs)
    check_loaded_weights(model, info, str(source), allow_mismatched, allow_fresh_policy)
    return (model, info) if want_info else model


@dataclass
class RePoCausalLMOutput(CausalLMOutputWithPast):
    """`CausalLMOutputWithPast` plus `positions`: per layer `[B, H, S]` (None for NoPE layers)."""

    positions: tuple[torch.Tensor | None, ...] | None = None


class RePoOlmo2PreTrainedModel(Olmo2PreTrainedModel):
    config_class = RePoOlmo2Config
    config: RePoOlmo2Config

    def _init_weights(self, module):
        """OLMo-2's init, except that modules a position policy registered start as that policy says."""
        if not init_policy_module(module):
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
        return load_checked(load, pretrained_model_name_or_path, *model_args, allow_fresh_policy=asked, **kwargs)

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
            **cache_argument(given_cache(past_key_values, kwargs)),
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


def _register_auto_classes() -> None:
    """model type "repo_olmo2" -> these classes in transformers' Auto classes (no `trust_remote_code`)."""
    AutoConfig.register(RePoOlmo2Config.model_type, RePoOlmo2Config, exist_ok=True)
    AutoModel.register(RePoOlmo2Config, RePoOlmo2Model, exist_ok=True)
    AutoModelForCausalLM.register(RePoOlmo2Config, RePoOlmo2ForCausalLM, exist_ok=True)


_register_auto_classes()  # wherever the classes are loaded, saved checkpoints load through the Auto classes
