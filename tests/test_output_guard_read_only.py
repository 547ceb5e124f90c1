"""`check_parents` says why an output folder cannot be written: a read-only file system is not a permission
problem (no chmod helps), so the line names it. Both cases are simulated: the suite may run as root."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from repo_common import output_guard
from repo_common.output_guard import OutputRefused, check_parents


@pytest.mark.parametrize(
    ("flag", "why"), [(os.ST_RDONLY, "it is on a read-only file system"), (0, "permission denied")]
)
def test_an_unwritable_folder_is_named_with_its_reason(tmp_path, monkeypatch, flag, why):
    monkeypatch.setattr(output_guard.os, "access", lambda path, mode: False)
    monkeypatch.setattr(output_guard.os, "statvfs", lambda path: SimpleNamespace(f_flag=flag))
    with pytest.raises(OutputRefused) as refused:
        check_parents(tmp_path / "run" / "records.jsonl", "--out")
    assert str(refused.value) == (
        f"--out {tmp_path / 'run' / 'records.jsonl'}: {tmp_path} cannot be written ({why}); pass an --out in a "
        "directory you can write to"
    )


def test_a_writable_folder_passes(tmp_path):
    check_parents(tmp_path / "run" / "records.jsonl", "--out")
