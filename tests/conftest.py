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
