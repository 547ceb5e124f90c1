"""What `python -m evaluation run` does once its options are parsed (`evaluation.cli` declares them).

Torch-free: it resolves and checks the options (a refusal comes in a second), and only then hands the run
to `evaluation.run_launch`, which loads the harness.
"""

from __future__ import annotations

from jsonargparse import Namespace

from evaluation.config import resolve
from evaluation.run_config import check_tiny_default_options
from evaluation.run_directory import check_run_directory
from repo_common.config_cli import ConfigParser, deferred, dump_config

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
