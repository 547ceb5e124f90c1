"""Floor 5 of the house (docs/architecture.md): the commands of ``python -m workflows`` and what ``scripts/`` run.

The quickstart and its loop files' config and estimates, the position-bias recipe and reproduction, the tiny
models as package data, the real-model study, the lm-eval cross-check, the reversal reproduction, the
benchmarks, the GPU checks, the offline GPU kit; running commands, resumable steps, A/B timing. It may import
every floor below it; nothing in ``repo_common``, ``repo_train``, ``evaluation`` or ``search`` imports it
(``tests/test_layering.py`` checks this).
"""
