"""`python -m workflows study-real-model`: lost in the middle on SmolLM2-135M-Instruct, every training-free method.

`command` holds the options and the checks made before anything is written (no torch: `--help` and the
refusals stay fast); `study` runs the steps, each in its own module: `data` (the question split), `speed`
(the speed probe and projection), `methods` (the methods' settings and commands), `bias` (the attention
bias), `verdicts` (each paper's claim judged) and `report` (README.md and the figure).
"""
