"""Continual pre-training (issue 3): Lightning modules, strategies, callbacks, CLI.

The only package of repo_train that imports Lightning (and, lazily,
DeepSpeed); `repo_train.modeling` and `repo_train.data` stay importable
without them. `objective.py` and `optim.py` hold the plain-torch pieces.
"""
