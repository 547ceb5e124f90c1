"""The training package: position policies and REPO-OLMo-2 (`modeling`), data, continual pre-training, export.

The LPES search lives in `search/` and the calibrators and evaluation harness in
`evaluation/`; both use `modeling`.

The model classes are re-exported lazily (module `__getattr__`), so importing a
command's module (`repo_train.cli`) does not load torch and transformers before
its arguments are parsed. Loading `repo_train.modeling` (any of its classes, or
`repo_train.RePoOlmo2ForCausalLM`) registers `RePoOlmo2Config` /
`RePoOlmo2ForCausalLM` with transformers' Auto classes (model type
"repo_olmo2"), so saved checkpoints load with
`AutoModelForCausalLM.from_pretrained` and no `trust_remote_code`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Re-exported names -> the module that defines them (imported on first use).
_LAZY = {
    "RePoOlmo2Config": "repo_train.modeling",
    "RePoOlmo2ForCausalLM": "repo_train.modeling",
    "RePoOlmo2Model": "repo_train.modeling",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'repo_train' has no attribute {name!r}")


__all__ = ["RePoOlmo2Config", "RePoOlmo2ForCausalLM", "RePoOlmo2Model", "__version__"]
