"""`evaluation run` once its options are checked (`evaluation.run_command.run`): watch the launcher, join the
process group under torchrun, run the harness, print the scores and render the report.
"""

from __future__ import annotations

import sys

from evaluation.report import render_report
from evaluation.run_config import TINY_DEFAULTS, RunConfig, score_key
from evaluation.runner import RunInterrupted, run
from repo_common.distributed import close_distributed, init_distributed, rank_and_world
from repo_common.launcher_watch import watch_launcher

#: Exit code of a run stopped early by --max_records (rerunning it resumes).
EXIT_INTERRUPTED = 3
#: Exit code of a run Ctrl-C stopped: 128 + SIGINT's number, as a shell reports it (and as `fit` exits).
EXIT_SIGINT = 130


def launch(config: RunConfig, config_text: str) -> int:
    """Run `config` (stored as OUT/config.yaml: `config_text`); the exit code of `evaluation run`."""
    watch_launcher()  # a torchrun worker ends when its launcher is gone
    started = init_distributed()  # under torchrun: one process group, the work shared out (evaluation.runner.run)
    if config.model is None and rank_and_world()[0] == 0:
        print(
            f"no --model: the built-in tiny random model; defaults for options not given: {TINY_DEFAULTS}",
            file=sys.stderr,
        )
    try:
        summary = run(config, config_text=config_text)  # its max_records and no_progress
    except RunInterrupted as stop:
        print(f"python -m evaluation run: {stop}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # Ctrl-C: the records written so far stay (a torn last line is redone on resume)
        print(
            f"python -m evaluation run: stopped by SIGINT; the records so far are kept in {config.out}: run the same "
            "command again to resume",
            file=sys.stderr,
        )
        return EXIT_SIGINT
    finally:
        close_distributed(started)
    if summary is None:  # a rank other than 0: rank 0 merged the records and writes the summary and report
        return 0
    for task, by_method in summary["results"].items():
        score = score_key(summary["tasks"].get(task, {}).get("metric"))
        for method, result in by_method.items():
            print(f"{task:12s} {method:24s} n={result['n']:<5d} {score}={result['accuracy']:.3f}")
    if not config.no_report:
        paths = render_report(config.out)
        print(f"report: {paths[-1]}")
    return 0
