"""Shared test setup: quiet transformers, deterministic torch, fp32 everywhere."""

import pytest
import torch
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
torch.set_num_threads(2)


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
