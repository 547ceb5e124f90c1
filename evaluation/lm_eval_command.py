"""`python -m evaluation lm-eval ARGS...`: lm-evaluation-harness's own CLI, with the `repo-train` model registered.

ARGS go to lm-eval unchanged (`run --model repo-train --model_args pretrained=DIR,method=pi:scale=2 --tasks ...`).
A module of its own, free of torch and lm-eval, so a missing lm-eval (the optional `crosscheck` extra) is one
line before anything heavy loads; the model is `evaluation.lm_eval_model`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from repo_common.config_cli import deferred

MISSING = "python -m evaluation lm-eval: lm-evaluation-harness is not installed; pip install -e '.[crosscheck]'"


def main(argv: Sequence[str]) -> int:
    if importlib.util.find_spec("lm_eval") is None:
        print(MISSING, file=sys.stderr)
        return 2
    return deferred("evaluation.lm_eval_model", "run_cli")(list(argv))  # imports lm-eval and torch only now
