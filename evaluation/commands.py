"""What `python -m evaluation`'s commands do once their options are parsed (`evaluation.cli` declares them).

Torch-free: `run` resolves and checks its options (a refusal comes in a second), and only then hands the run
to `evaluation.run_launch`, which loads the harness.
"""

from __future__ import annotations

from pathlib import Path

from jsonargparse import Namespace

from evaluation.config import resolve
from evaluation.report import render_report
from evaluation.results import resummarize
from evaluation.run_config import check_tiny_default_options
from evaluation.run_directory import check_run_directory
from repo_common.config_cli import ConfigParser, deferred, dump_config
from repo_common.output_guard import require_path

#: The run itself (torch, datasets), imported once the options are checked.
launch = deferred("evaluation.run_launch", "launch")


def run(options: Namespace, _parser: ConfigParser) -> int:
    """`evaluation run`: the resolved configuration printed (`--print_config`), or checked and run."""
    resolved = resolve(options)  # torch-free, as are the checks below: a refusal comes in a second
    text = dump_config(resolved.config)
    if options.print_config:
        print(text, end="")
        return 0
    check_run_directory(options.out)  # another program's folder, or records of unknown settings: before any notice
    if options.model is None:  # --dtype / --attn-implementation would be ignored by the tiny default
        check_tiny_default_options(options.dtype, options.attn_implementation)
    return launch(resolved.run, text)


def report(options: Namespace, _parser: ConfigParser) -> int:
    """`evaluation report`: re-render the plots and report.md of a run (and the runs it is compared with)."""
    require_path(options.out)  # '' would mean the current directory
    for directory in options.compare:
        require_path(directory, "--compare")
    paths = render_report(options.out, options.compare, seeds=options.seeds)
    print("\n".join(str(p) for p in paths))
    return 0


def summarize(options: Namespace, _parser: ConfigParser) -> int:
    """`evaluation summarize`: rebuild summary.json from the records, then the report unless --no_report."""
    require_path(options.out)  # '' would mean the current directory
    summary = resummarize(options.out)
    print(f"{Path(options.out) / 'summary.json'}: format_version {summary['format_version']}")
    if not options.no_report:
        print("\n".join(str(p) for p in render_report(options.out)))
    return 0
