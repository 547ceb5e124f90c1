"""Paths of the committed Lost in the Middle subsets (see tests/fixtures/lost_in_the_middle/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lost_in_the_middle"


@pytest.fixture
def nq_oracle_path() -> str:
    """First 40 questions of nq-open-oracle.first2000.jsonl.gz."""
    return str(FIXTURES / "nq-open-oracle.first40.jsonl.gz")


@pytest.fixture
def kv_path() -> str:
    """First 12 examples of kv-retrieval-75_keys.jsonl.gz."""
    return str(FIXTURES / "kv-retrieval-75_keys.first12.jsonl.gz")
