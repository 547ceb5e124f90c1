"""`python -m evaluation lm-eval ARGS...`: lm-evaluation-harness's own CLI, with the `repo-train` model registered.

ARGS go to lm-eval unchanged (`run --model repo-train --model_args pretrained=DIR,method=pi:scale=2 --tasks ...`),
except two commands of this project: `tasks` writes Lost in the Middle as lm-eval tasks (one per gold position,
`evaluation.lm_eval_tasks`), and `report` reads lm-eval's per-sample output of them into this project's summary
and report (`evaluation.lm_eval_report`). A module of its own, free of torch and lm-eval, so a missing lm-eval
(the optional `crosscheck` extra) is one line before anything heavy loads; the model is `evaluation.lm_eval_model`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from repo_common.config_cli import deferred, dispatch

MISSING = "python -m evaluation lm-eval: lm-evaluation-harness is not installed; pip install -e '.[crosscheck]'"

#: The project's own commands under `lm-eval` (neither needs lm-eval installed: they write and read files).
OWN_COMMANDS = {
    "tasks": (
        "write Lost in the Middle as lm-eval tasks (one per gold position, grouped) into --out",
        deferred("evaluation.lm_eval_tasks", "add_arguments"),
        deferred("evaluation.lm_eval_tasks", "run"),
    ),
    "report": (
        "lm-eval's per-sample output of those tasks (--log_samples) as this project's summary and report",
        deferred("evaluation.lm_eval_report", "add_arguments"),
        deferred("evaluation.lm_eval_report", "run"),
    ),
}


def main(argv: Sequence[str]) -> int:
    if list(argv[:1]) in ([name] for name in OWN_COMMANDS):
        return dispatch(
            "python -m evaluation lm-eval",
            "Lost in the Middle for lm-evaluation-harness: its tasks, and its results read back.",
            {argv[0]: OWN_COMMANDS[argv[0]]},
            list(argv),
        )
    if importlib.util.find_spec("lm_eval") is None:
        print(MISSING, file=sys.stderr)
        return 2
    return deferred("evaluation.lm_eval_model", "run_cli")(list(argv))  # imports lm-eval and torch only now
