"""`python -m workflows reproduce-reversal`: REPO paper, appendix C (text reversal with NoPE, RoPE and REPO).

`options` holds the options and the checks made before anything is written (no torch: `--help` and the
refusals stay fast), `command` parses them; `reproduction` runs the loop: `training` (one model's data, config, training, export
and evaluation), `results` (aggregation over seeds) and `report` (results.json, results.md, the figure).
"""
