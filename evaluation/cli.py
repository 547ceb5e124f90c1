"""`python -m evaluation`: run a task × method grid on a model, or re-render / rebuild a run's report.

Every command is a jsonargparse parser (`repo_common.config_cli`): options on
the command line or in `--config FILE.yaml`, `--print_config` for the
resolved configuration. This module only declares the commands: `run`'s
options are the fields of `evaluation.run_config.RunConfig`
(`evaluation.config`), and what each command does lives in
`evaluation.run_command` and `evaluation.report_commands`, imported once its
options are parsed (`deferred`), so `--help` loads none of it. User mistakes
end with one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

from repo_common.config_cli import ConfigParser, deferred, dispatch


def _add_report(parser: ConfigParser) -> None:
    parser.add_argument("--out", type=str, required=True, help="a run directory")
    parser.add_argument("--compare", type=list[str], default=[], help="other run directories to overlay")
    parser.add_argument(
        "--seeds",
        action="store_true",
        help="the runs (--out and every --compare) are seeds of one setup: add mean ± sample std over them",
    )
    parser.repeatable = ("compare",)


def _add_summarize(parser: ConfigParser) -> None:
    parser.add_argument("--out", type=str, required=True, help="a run directory")
    parser.add_argument("--no_report", action="store_true", help="skip plots and report.md")


COMMANDS = {
    "run": (
        "evaluate tasks × methods; write records, summary, plots and a report",
        deferred("evaluation.config", "add_run_options"),
        deferred("evaluation.run_command", "run"),
    ),
    "report": (
        "re-render plots and report.md from OUT/summary.json",
        _add_report,
        deferred("evaluation.report_commands", "report"),
    ),
    "summarize": (
        "rebuild OUT/summary.json from OUT/records.jsonl with this version's statistics",
        _add_summarize,
        deferred("evaluation.report_commands", "summarize"),
    ),
    "calibrate-fim": (
        "make the bias file of amortised Found in the Middle (fim:calibration=amortised,bias_file=FILE)",
        deferred("evaluation.fim_calibration", "add_arguments"),
        deferred("evaluation.fim_calibration", "run"),
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["lm-eval"]:  # lm-eval's own CLI parses the rest, unchanged (evaluation.lm_eval_command)
        return deferred("evaluation.lm_eval_command", "main")(args[1:])
    return dispatch(
        "python -m evaluation",
        "Evaluate a model, with training-free position methods, on long-context tasks with the relevant item "
        "at each position; write per-example records, a summary, plots and a report.",
        COMMANDS,
        argv,
        more_commands={
            "lm-eval": "lm-evaluation-harness's own CLI, with --model repo-train: its tasks on these methods"
        },
        resolves_config={"run"},
    )
