"""Floor 5 of the house (docs/architecture.md): what ``scripts/`` and ``python -m workflows`` run.

Running commands and resumable steps, the quickstart loop's config and estimates, A/B timing, the
benchmarks, the GPU checks, the offline GPU kit, the real-model study, the lm-eval cross-check and the
reversal reproduction. It may import every floor below it; nothing in ``repo_common``, ``repo_train``,
``evaluation`` or ``search`` imports it (``tests/test_layering.py`` checks this).
"""
