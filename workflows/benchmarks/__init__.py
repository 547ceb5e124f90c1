"""The benchmarks, `python -m workflows benchmark-*`: each measures one cost side by side in one run.

A benchmark is two modules: `NAME.py` holds its options (a dataclass extending `options.BenchmarkOptions`), the
checks that need no model and its report's text (what `--help`, `--print_config` and a refusal load: no torch),
and `NAME_measure.py` the measuring, imported by `options.measured` only once the options are built and judged
(docs/benchmarks.md lists what each measures).
"""
