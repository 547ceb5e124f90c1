"""The training package: position policies and REPO-OLMo-2 (`modeling`), data, continual pre-training, export.

The LPES search lives in `search/` and the calibrators and evaluation harness in
`evaluation/`; both use `modeling`.

Importing this package registers `RePoOlmo2Config` / `RePoOlmo2ForCausalLM`
with transformers' Auto classes (model type "repo_olmo2"), so saved
checkpoints load with `AutoModelForCausalLM.from_pretrained` and no
`trust_remote_code`.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM, RePoOlmo2Model

__version__ = "0.1.0"


def _register_auto_classes() -> None:
    AutoConfig.register(RePoOlmo2Config.model_type, RePoOlmo2Config, exist_ok=True)
    AutoModel.register(RePoOlmo2Config, RePoOlmo2Model, exist_ok=True)
    AutoModelForCausalLM.register(RePoOlmo2Config, RePoOlmo2ForCausalLM, exist_ok=True)


_register_auto_classes()

__all__ = ["RePoOlmo2Config", "RePoOlmo2ForCausalLM", "RePoOlmo2Model", "__version__"]
