"""Training-free methods the harness applies during generation: registry, spec parsing and the built-ins.

`build_method('pi:scale=2')` makes one; `MethodStack.parse('a+b:k=v')` a stack.
A new method is a `Method` subclass decorated with `@register_method` in a
module the user names with `--import` (or, for a built-in, a line in
`base.METHODS`); the harness needs no change.

Importing this package loads no torch: the interface and the registry (`base`) are plain Python, and the
built-in methods' modules load when a spec names them or one of their names below is first used (module
`__getattr__`), so `evaluation run --help` and `--print_config` answer in a second.
"""

from __future__ import annotations

import importlib
from typing import Any

from evaluation.methods.base import (
    METHODS,
    Baseline,
    GenerationBatch,
    GenerationState,
    Method,
    MethodStack,
    build_method,
    configure_method,
    parse_method_spec,
    parse_value,
    register_method,
)

#: Names re-exported from modules that import torch, loaded on first use.
_LAZY = {
    "PolicyMethod": "evaluation.methods.policy_method",
    "PositionInterpolation": "evaluation.methods.pi",
    "ScaledRopePolicy": "evaluation.methods.pi",
    "current_policies": "repo_train.modeling.swapping",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'evaluation.methods' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)  # heavy: keeps --help fast (torch)
    globals()[name] = value
    return value


__all__ = [
    "METHODS",
    "Baseline",
    "GenerationBatch",
    "GenerationState",
    "Method",
    "MethodStack",
    "PolicyMethod",
    "PositionInterpolation",
    "ScaledRopePolicy",
    "build_method",
    "configure_method",
    "current_policies",
    "parse_method_spec",
    "parse_value",
    "register_method",
]
