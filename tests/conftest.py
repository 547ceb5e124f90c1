"""Shared test setup: quiet transformers, deterministic torch, fp32 everywhere."""

import os
from pathlib import Path

import pytest
import torch
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
# One intra-op thread unless OMP_NUM_THREADS says otherwise (`OMP_NUM_THREADS=2 pytest ...` runs with two);
# the variable is set here, so the CLIs, scripts and torchrun workers of the slow tests inherit it too.
# The models here are tiny, so a second thread has little work to share, and on a busy 2-core machine two
# spinning threads made the fast suite 4x slower (489 s vs 114 s, measured side by side with other jobs).
# Results of 1 and 2 threads may differ in the last bits; the tolerances allow for it (tests/float_checks.py).
os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or "1"
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# Under pytest-xdist (CI runs the slow suite with `-n 2`) each worker gets its own torchrun port, so two
# multi-process launches through scripts/torchrun_module.sh (default port 29500) never collide.
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    os.environ["MASTER_PORT"] = str(29600 + 17 * int(os.environ["PYTEST_XDIST_WORKER"][2:]))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One intra-op thread for the test: for tiny models on a shared 2-core machine two threads are several
    times slower (they spin against each other), and torchrun workers run with one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: "required": the real-model tests fail when the real extra is missing (CI sets it); otherwise they skip.
REAL_MODEL_ENV = "REPO_TRAIN_REAL_MODEL"


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """SmolLM2-135M-Instruct as an HF directory (float32), made once by `python -m repo_train real-model`'s code
    into the checkout's models/ folder and reused (the command is idempotent: a later session takes ~1 s)."""
    import fcntl

    from repo_train.real_model import DEFAULT_OUT, make_real_model

    out = Path(__file__).resolve().parents[1] / DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        # pytest-xdist workers (CI's slow suite) share the checkout: one converts while the others wait for it.
        with open(out.parent / ".real-model.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return make_real_model(out, log=lambda *_: None)
    except ValueError as err:  # the extra is not installed
        if os.environ.get(REAL_MODEL_ENV) == "required":
            pytest.fail(str(err))
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def lm_eval_installed() -> None:
    """lm-evaluation-harness (the crosscheck extra) is importable: else a skip, or a failure where CI requires it."""
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        message = "lm-eval is not installed (the crosscheck extra: scripts/setup.sh --real)"
        if os.environ.get(REAL_MODEL_ENV) == "required":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(autouse=True)
def registries_restored():
    """Every registry (tasks, methods, policies, presets, data sources) as it was, and no user module the test
    imported left loaded: a part a test registers leaks into no other test (a module left loaded would not
    register its parts again when a later test imports it), whichever tests share a process (the suites run on
    two pytest-xdist workers). Lazy built-ins stay unloaded. For every test; a test that registers on purpose
    may name it to reach the registries."""
    import sys

    from evaluation.methods import METHODS
    from evaluation.tasks import TASKS
    from repo_train.data import DATA_SOURCES
    from repo_train.modeling import POSITION_POLICIES
    from repo_train.modeling.presets import PRESETS

    registries = (TASKS, METHODS, POSITION_POLICIES, PRESETS, DATA_SOURCES)
    saved, loaded = [dict(registry._entries) for registry in registries], set(sys.modules)
    yield registries
    for registry, entries in zip(registries, saved, strict=True):
        registry._entries.clear()
        registry._entries.update(entries)
    for name in set(sys.modules) - loaded:
        if name.startswith("examples."):
            del sys.modules[name]
