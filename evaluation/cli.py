"""`python -m evaluation`: run a task × method grid on a model, re-render / rebuild a run's report, or make
amortised Found in the Middle's bias file (`calibrate-fim`, `evaluation.fim_calibration`).

Every command is a jsonargparse parser (`repo_common.config_cli`): options on
the command line or in `--config FILE.yaml`, `--print_config` for the
resolved configuration. `run`'s options and their resolution into the
runner's `RunConfig` live in `evaluation.config`; the work is in
`evaluation.runner` and `evaluation.report`. User mistakes end with one line
on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jsonargparse import Namespace

from repo_common.config_cli import ConfigParser, deferred, dispatch, dump_config

EXIT_INTERRUPTED = 3


def _add_run(parser: ConfigParser) -> None:
    from evaluation.config import EPILOG, REPEATED_FLAGS, add_run_options  # lazy: the other commands skip it

    parser.epilog = EPILOG
    parser.repeated_flags = REPEATED_FLAGS
    add_run_options(parser)


def _run(options: Namespace, _parser: ConfigParser) -> int:
    from evaluation.config import TINY_DEFAULTS, resolve  # lazy: the other commands skip it
    from evaluation.run_config import check_tiny_default_options, score_name  # lazy: the other commands skip it
    from evaluation.run_directory import check_run_directory  # lazy: the other commands skip it

    resolved = resolve(options)  # torch-free, as are the checks below: a refusal comes in a second
    text = dump_config(resolved.config)
    if options.print_config:
        print(text, end="")
        return 0
    check_run_directory(options.out)  # another program's folder, or records of unknown settings: before any notice
    if options.model is None:  # --dtype / --attn-implementation would be ignored by the tiny default
        check_tiny_default_options(options.dtype, options.attn_implementation)
    from evaluation.report import render_report  # heavy: after the checks above (matplotlib)
    from evaluation.runner import RunInterrupted, run  # heavy: after the checks above (torch, datasets)
    from repo_common.distributed import close_distributed, init_distributed, rank_and_world  # heavy: torch
    from repo_train.training.launcher_watch import watch_launcher  # lazy: only a run watches its launcher

    watch_launcher()  # a torchrun worker ends when its launcher is gone
    started = init_distributed()  # under torchrun: one process group, the work shared out (evaluation.runner.run)
    if options.model is None and rank_and_world()[0] == 0:
        print(
            f"no --model: the built-in tiny random model; defaults for options not given: {TINY_DEFAULTS}",
            file=sys.stderr,
        )
    try:
        summary = run(resolved.run, max_records=options.max_records, progress=not options.no_progress, config_text=text)
    except RunInterrupted as stop:
        print(f"python -m evaluation run: {stop}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        close_distributed(started)
    if summary is None:  # a rank other than 0: rank 0 merged the records and writes the summary and report
        return 0
    for task, by_method in summary["results"].items():
        score = score_name(summary["tasks"].get(task, {}).get("metric")).replace(" ", "_")
        for method, result in by_method.items():
            print(f"{task:12s} {method:24s} n={result['n']:<5d} {score}={result['accuracy']:.3f}")
    if not options.no_report:
        paths = render_report(options.out)
        print(f"report: {paths[-1]}")
    return 0


def _add_report(parser: ConfigParser) -> None:
    parser.add_argument("--out", type=str, required=True, help="a run directory")
    parser.add_argument("--compare", type=list[str], default=[], help="other run directories to overlay")
    parser.add_argument(
        "--seeds",
        action="store_true",
        help="the runs (--out and every --compare) are seeds of one setup: add mean ± sample std over them",
    )
    parser.repeated_flags = {"--compare": "compare"}


def _report(options: Namespace, _parser: ConfigParser) -> int:
    from evaluation.report import render_report  # lazy: keeps --help fast
    from repo_common.output_guard import require_path  # lazy: keeps --help fast

    require_path(options.out)  # '' would mean the current directory
    for directory in options.compare:
        require_path(directory, "--compare")
    paths = render_report(options.out, options.compare, seeds=options.seeds)
    print("\n".join(str(p) for p in paths))
    return 0


def _add_summarize(parser: ConfigParser) -> None:
    parser.add_argument("--out", type=str, required=True, help="a run directory")
    parser.add_argument("--no_report", "--no-report", action="store_true", help="skip plots and report.md")


def _summarize(options: Namespace, _parser: ConfigParser) -> int:
    from evaluation.report import render_report  # lazy: keeps --help fast
    from evaluation.results import resummarize  # lazy: keeps --help fast
    from repo_common.output_guard import require_path  # lazy: keeps --help fast

    require_path(options.out)  # '' would mean the current directory
    summary = resummarize(options.out)
    print(f"{Path(options.out) / 'summary.json'}: format_version {summary['format_version']}")
    if not options.no_report:
        print("\n".join(str(p) for p in render_report(options.out)))
    return 0


COMMANDS = {
    "run": ("evaluate tasks × methods; write records, summary, plots and a report", _add_run, _run),
    "report": ("re-render plots and report.md from OUT/summary.json", _add_report, _report),
    "summarize": (
        "rebuild OUT/summary.json from OUT/records.jsonl with this version's statistics",
        _add_summarize,
        _summarize,
    ),
    "calibrate-fim": (
        "make the bias file of amortised Found in the Middle (fim:calibration=amortised,bias_file=FILE)",
        deferred("evaluation.fim_calibration", "add_arguments"),
        deferred("evaluation.fim_calibration", "run"),
    ),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch(
        "python -m evaluation",
        "Evaluate a model, with training-free position methods, on long-context tasks with the relevant item "
        "at each position; write per-example records, a summary, plots and a report.",
        COMMANDS,
        argv,
        resolves_config={"run", "calibrate-fim"},
    )
