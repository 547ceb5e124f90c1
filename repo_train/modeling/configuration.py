"""`RePoOlmo2Config`: every `Olmo2Config` field plus the position method.

Also reads the published RePo layout, whose `config.json` is a plain OLMo-2
config with a `pe_config` object (`dynamic_pe_mode`, `dynamic_pe_start_layer`,
some files spelling it `dynmaic_pe_start_layer`).

`from_pretrained` (also reached through `RePoOlmo2ForCausalLM.from_pretrained`)
reads only directories of those kinds: one without `config.json`, or whose
`config.json` names another architecture, is refused at once. transformers
itself would fill every missing field with the 7B defaults and build a model of
that size from the wrong weights.
"""

from __future__ import annotations

import os

from huggingface_hub.dataclasses import strict
from transformers import Olmo2Config

from repo_common.model_directory import looks_like_hub_id, read_model_config
from repo_train.modeling.methods import check_position_options, default_repo_start_layer, layer_plan

#: `pe_config.dynamic_pe_mode` values of the published code and what they mean here.
PUBLISHED_PE_MODES = {"swigluex_multihead": "repo", "none": "rope", "nope": "nope"}
#: `model_type`s of the config.json files `from_pretrained` reads: OLMo-2 (also the published RePo
#: layout, OLMo-2 plus `pe_config`) and this project's own.
ACCEPTED_MODEL_TYPES = ("olmo2", "repo_olmo2")
ACCEPTED_DESCRIPTION = (
    "OLMo-2 (model_type 'olmo2'), this project's 'repo_olmo2', or the published RePo layout ('olmo2' with a pe_config)"
)


def check_model_type(config_dict: dict, source: str) -> None:
    """Refuse, in one line, a config.json that is missing or belongs to another architecture."""
    if not config_dict:
        raise FileNotFoundError(
            f"{source} has no config.json; RePoOlmo2Config/RePoOlmo2ForCausalLM load a save_pretrained directory "
            f"of {ACCEPTED_DESCRIPTION}"
        )
    model_type = config_dict.get("model_type")
    if model_type not in ACCEPTED_MODEL_TYPES:
        found = f"model_type {model_type!r}" if model_type is not None else "no model_type"
        raise ValueError(
            f"{source}: config.json has {found}; RePoOlmo2Config/RePoOlmo2ForCausalLM load only "
            f"{ACCEPTED_DESCRIPTION} (load other architectures with AutoModelForCausalLM)"
        )


def check_local_source(source: str) -> None:
    """A path that looks local but is not there is refused at once (transformers would spend ~30 s asking the
    hub for it), and a local config.json must be a JSON object (a list or garbage: one line naming it)."""
    if os.path.isdir(source):
        if os.path.isfile(os.path.join(source, "config.json")):
            read_model_config(source)
        return
    if not os.path.isfile(source) and not looks_like_hub_id(source):  # a config file itself is transformers' to read
        raise FileNotFoundError(
            f"{source} does not exist; RePoOlmo2Config/RePoOlmo2ForCausalLM load a local save_pretrained directory "
            f"(a hub id is written org/name)"
        )


def position_fields_from_pe_config(pe_config: dict, num_layers: int) -> dict:
    """Translate a published `pe_config` into this project's fields, or fail clearly."""
    if not isinstance(pe_config, dict):
        pe_config = dict(vars(pe_config))
    mode = pe_config.get("dynamic_pe_mode", "none")
    if mode not in PUBLISHED_PE_MODES:
        raise ValueError(
            f"pe_config.dynamic_pe_mode={mode!r} is not supported: this project implements "
            f"{sorted(PUBLISHED_PE_MODES)} (the RePo paper's method is 'swigluex_multihead')."
        )
    start = pe_config.get("dynamic_pe_start_layer", pe_config.get("dynmaic_pe_start_layer", 0))
    layer_ids = pe_config.get("dynamic_pe_layer_ids", pe_config.get("dynmaic_pe_layer_ids"))
    if layer_ids:
        ids = sorted(int(i) for i in str(layer_ids).split(",") if int(i) >= int(start))
        if ids != list(range(int(start), num_layers)):
            raise ValueError(
                f"pe_config lists dynamic layers {ids}; only a contiguous range from the start layer to the "
                f"last layer ({int(start)}..{num_layers - 1}) is supported."
            )
    return {"position_method": PUBLISHED_PE_MODES[mode], "repo_start_layer": int(start)}


@strict(accept_kwargs=True)
class RePoOlmo2Config(Olmo2Config):
    """OLMo-2 with a position method. Identical to `Olmo2Config` except the three fields below."""

    model_type = "repo_olmo2"

    position_method: str = "rope"
    """One of "rope", "nope", "r2n1", "n2r1", "repo", or any registered policy's name (`repo_train.modeling.methods`)."""
    repo_start_layer: int | None = None
    """First REPO layer; layers below keep RoPE. Default ⌊num_hidden_layers / 3⌋."""
    repo_hidden_size: int | None = None
    """d_p, width of REPO's position representation. Default hidden_size // 8."""
    position_options: dict | None = None
    """The position policy's own options (its `Options` dataclass), e.g. REPO's curriculum. Default none."""

    def __post_init__(self, **kwargs):
        pe_config = kwargs.pop("pe_config", None)
        if pe_config is not None:
            for key, value in position_fields_from_pe_config(pe_config, self.num_hidden_layers).items():
                setattr(self, key, value)
        if self.repo_start_layer is None:
            self.repo_start_layer = default_repo_start_layer(self.num_hidden_layers)
        if self.repo_hidden_size is None:
            self.repo_hidden_size = self.hidden_size // 8
        if self.position_options is None:
            self.position_options = {}
        super().__post_init__(**kwargs)
        self.check_position_fields()

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        """transformers' reader, refusing a missing config.json or another architecture (see the module doc).

        Every `from_pretrained` of this config (and of the model classes) goes
        through here, before any weight is allocated.
        """
        source = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "").rstrip(os.sep)
        if isinstance(pretrained_model_name_or_path, str | os.PathLike):
            check_local_source(source or str(pretrained_model_name_or_path))
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        check_model_type(config_dict, source or str(pretrained_model_name_or_path))
        # Accepted: read as this class (also silences transformers' "olmo2 instantiates repo_olmo2" warning).
        return {**config_dict, "model_type": cls.model_type}, kwargs

    def check_position_fields(self) -> None:
        """Fail early, naming the field and the fix."""
        layer_plan(self.position_method, self.num_hidden_layers, self.repo_start_layer)
        check_position_options(self)
        d_p = self.repo_hidden_size
        if not isinstance(d_p, int) or not 1 <= d_p <= self.hidden_size:
            raise ValueError(
                f"repo_hidden_size (d_p) must be an integer in [1, hidden_size={self.hidden_size}], got {d_p!r}; "
                f"the paper uses hidden_size // 8 = {self.hidden_size // 8}."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}."
            )
