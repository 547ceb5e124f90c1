"""Helpers that serve ``scripts/``: running commands, the quickstart loop's config, A/B timing.

They are not the model core: nothing in ``repo_train.modeling``, ``repo_train.data`` or
``repo_train.training`` imports them (``tests/test_layering.py`` checks this).
"""
