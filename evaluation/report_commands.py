"""What `python -m evaluation report` and `summarize` do once their options are parsed (`evaluation.cli`
declares them): re-render a run's plots and report, rebuild its summary."""

from __future__ import annotations

from pathlib import Path

from jsonargparse import Namespace

from evaluation.report import render_report
from evaluation.results import resummarize
from repo_common.config_cli import ConfigParser
from repo_common.output_guard import require_path


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
