"""Floor 5 of the house (docs/architecture.md): `python -m workflows` (the quickstart, the position-bias
reproduction, `check-gpu`) and what ``scripts/`` run.

Running commands and resumable steps, the quickstart and its loop files' config and estimates, the
position-bias recipe, the tiny models as package data, A/B timing and the GPU checks. It may import every
floor below it; nothing in ``repo_common``, ``repo_train``, ``evaluation`` or ``search`` imports it
(``tests/test_layering.py`` checks this).
"""
