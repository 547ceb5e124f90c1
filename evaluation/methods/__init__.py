"""Training-free methods the harness applies during generation: registry, spec parsing and the built-ins.

`build_method('pi:scale=2')` makes one; `MethodStack.parse('a+b:k=v')` a stack.
A new method is a `Method` subclass decorated with `@register_method` in a
module imported here; the harness needs no change.
"""

from evaluation.methods import (
    caliope,  # noqa: F401  (registers 'caliope')
    found_in_middle,  # noqa: F401  (registers 'fim')
    lpes,  # noqa: F401  (registers 'lpes')
    pcd,  # noqa: F401  (registers 'pcd')
    pi,  # noqa: F401  (registers 'pi')
    scaling_baselines,  # noqa: F401  (registers 'ms_poe', 'attention_buckets')
)
from evaluation.methods.base import (
    METHODS,
    Baseline,
    GenerationBatch,
    GenerationState,
    Method,
    MethodStack,
    PolicyMethod,
    build_method,
    configure_method,
    current_policies,
    parse_method_spec,
    parse_value,
    register_method,
)
from evaluation.methods.pi import PositionInterpolation, ScaledRopePolicy

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
