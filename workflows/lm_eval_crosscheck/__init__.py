"""`python -m workflows crosscheck-lm-eval`: the project's harness against lm-evaluation-harness, same prompts.

`command` holds the options and the checks made before the model loads (no torch: `--help` and the refusals
stay fast); `check` runs the cross-check: `ours` (the harness's prompts and decode loop), `peer` (lm-eval's
HF backend), `generations` (`--score metric`), `loglik` (`--score gold_loglik`) and `timing` (both sides
timed, alternating).
"""
