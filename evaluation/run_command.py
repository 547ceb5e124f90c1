"""What `python -m evaluation run` does once its options are parsed (`evaluation.cli` declares them).

It checks the options that need no model first (the output folder, the model's files, the data, the tasks: a
refusal comes in a second, torch-free), then builds the methods: a built-in method's parameters and their checks
are its class, defined beside its torch code, so a spec naming one (`pi:scale=2`) imports torch. Only then does
it hand the run to `evaluation.run_launch`, which loads the harness.
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
    if not options.print_config:  # the checks of plain options first: building a method's class imports torch
        check_run_directory(options.out)  # another program's folder, or records of unknown settings: before any notice
        if options.model is None:  # --dtype / --attn_implementation would be ignored by the tiny default
            check_tiny_default_options(options.dtype, options.attn_implementation)
    resolved = resolve(options)  # the model's files, the data and the tasks torch-free; then the methods
    text = dump_config(resolved.config)
    if options.print_config:
        print(text, end="")
        return 0
    return launch(resolved.run, text)
