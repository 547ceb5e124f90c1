"""The harness's answer metrics as local `evaluate` metric modules, one directory each, loaded by path.

`<name>/<name>.py` is an `evaluate.Metric` whose rule is the pure function of
`evaluation.metrics` (one implementation of each rule, pinned to the Lost in the
Middle release and SQuAD); the module adds `evaluate`'s interface: features,
description, citation and `compute(predictions=..., references=...)`. Hub
metrics (`evaluate.load("squad")`) are fetched at load time; these load offline
from the installed package (`evaluation.metrics.metric_module`).

This package only re-exports the names a caller needs (`module_dir` and the module list); what the module
scripts share lives in `base`.
"""

from __future__ import annotations

from evaluation.metric_modules.base import MODULE_NAMES, MODULES_DIR, module_dir

__all__ = ["MODULES_DIR", "MODULE_NAMES", "module_dir"]
