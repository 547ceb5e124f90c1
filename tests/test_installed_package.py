"""A wheel of the checkout, installed (not editable) into a fresh venv and run from another directory.

This is what catches package code that reads the repository checkout (`tests/fixtures`, `configs/`,
the tiny models of the quickstart) instead of package data: inside the checkout such reads succeed, from an
installed copy they fail.

The fresh venv reuses the dependencies of the test interpreter through a `.pth` line naming its
site-packages. A plain path line adds the folder without running the `.pth` files inside it, so the editable
install of this checkout (an import hook installed by such a file) stays off, and the wheel's copy is the
only `repo_train` / `evaluation` / `search` there is; the test checks that before running anything.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads: setup.cfg finds the packages; README.md is the long description.
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.cfg",
    "README.md",
    "repo_common",
    "repo_train",
    "evaluation",
    "search",
    "workflows",
)

CHECK_INSTALL = """
import json, sys
import evaluation, repo_train, search
from evaluation.sample_data import KV_RETRIEVAL_75_KEYS, NQ_OPEN_ORACLE
from repo_train.training.strategies import DEFAULT_ZERO2_CONFIG
print(json.dumps({
    "files": [evaluation.__file__, repo_train.__file__, search.__file__],
    "sys_path": sys.path,
    "meta_path": [repr(finder) for finder in sys.meta_path],
    "samples": [NQ_OPEN_ORACLE.is_file(), KV_RETRIEVAL_75_KEYS.is_file()],
    "zero_stage": json.loads(DEFAULT_ZERO2_CONFIG.read_text())["zero_optimization"]["stage"],
}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )
    return result


def _build_wheel(tmp_path: Path, env: dict[str, str]) -> Path:
    """Build from a copy, so the checkout gets no build/ folder (stale files there would leak into wheels)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([*pip_wheel, "--wheel-dir", str(wheels), str(source)], cwd=tmp_path, env=env)
    (wheel,) = wheels.glob("repo_train-*.whl")
    return wheel


class Installed(NamedTuple):
    """The fresh venv's interpreter, its site-packages (the wheel's copy), an empty directory outside the
    checkout to run from, and the environment to run with."""

    python: str
    site: Path
    work: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The wheel built and installed once for the tests of this module."""
    tmp_path = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    wheel = _build_wheel(tmp_path, env)

    prefix = tmp_path / "venv"
    venv.create(prefix, with_pip=False)
    python = str(prefix / "bin" / "python")
    site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))
    assert site.is_dir(), site
    # --target installs into the new site-packages and ignores what the test interpreter has installed, so
    # pip neither skips the wheel nor touches the editable install of this checkout.
    pip_install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site)]
    _run([*pip_install, str(wheel)], cwd=tmp_path, env=env)
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    return Installed(python, site, work, env)


@pytest.mark.slow  # wheel build, venv, four fresh interpreters: ~2 min on a loaded 2-core machine
def test_wheel_install_runs_the_clis_outside_the_checkout(installed):
    python, site, work, env = installed
    check = json.loads(_run([python, "-c", CHECK_INSTALL], cwd=work, env=env).stdout.splitlines()[-1])
    for module_file in check["files"]:
        assert Path(module_file).is_relative_to(site), f"{module_file} is not the wheel's copy in {site}"
    assert all((work / entry).resolve() != ROOT for entry in check["sys_path"]), check["sys_path"]  # "" is cwd
    assert not any("editable" in finder.lower() for finder in check["meta_path"]), check["meta_path"]
    assert check["samples"] == [True, True]  # the Lost-in-the-Middle sample is package data
    assert check["zero_stage"] == 2  # so is the default DeepSpeed config

    demo = _run([python, "-m", "repo_train", "demo", "--steps", "2", "--new_tokens", "4"], cwd=work, env=env)
    assert "cached generation equals recomputation: True" in demo.stdout

    # Without --model and --data_dir, mdqa reads the packaged 40-question sample.
    _run(
        [python, "-m", "evaluation", "run", "--out", "eval", "--num_examples", "1", "--no_progress"], cwd=work, env=env
    )
    packaged_nq = site / "evaluation" / "data" / "lost_in_the_middle" / "nq-open-oracle.first40.jsonl.gz"
    with gzip.open(packaged_nq, "rt", encoding="utf-8") as f:
        first_question = json.loads(f.readline())
    first_record = json.loads((work / "eval" / "records.jsonl").read_text().splitlines()[0])
    assert first_record["task"] == "mdqa" and first_record["answers"] == first_question["answers"]
    assert (work / "eval" / "report.md").is_file()

    search = [python, "-m", "search", "run", "--out", "scales/tiny.json", "--ga.generations", "0", "--no_progress"]
    _run(search, cwd=work, env=env)
    scale_file = json.loads((work / "scales" / "tiny.json").read_text())
    assert len(scale_file["scales"]) == scale_file["num_layers"] == 4  # the tiny model's layers
    assert (work / "scales" / "tiny.log.jsonl").is_file()


#: The quickstart's smallest run that still runs every step: 1 training step per model, one question per position.
SMALLEST = ["--steps", "1", "--eval_examples", "1", "--fim_examples", "1", "--generations", "0", "--population", "4"]


@pytest.mark.slow  # the whole loop at its smallest: ~2 min on 2 cores, ~6 min on busy ones
def test_wheel_install_runs_the_quickstart_on_its_built_in_default(installed):
    """`python -m workflows quickstart` from the wheel, outside the checkout: the tiny models are package data,
    the steps run in the current directory, and every step's command in commands.sh is one the wheel has."""
    python, site, work, env = installed
    _run([python, "-m", "workflows", "quickstart", "--out", "qs", *SMALLEST], cwd=work, env=env, timeout=1200)
    out = work / "qs"
    report = (out / "README.md").read_text()
    for row in ("| base | baseline | kv | 1 (8) |", "| base | lpes (base-kv) |", "| rope | baseline |",
                "| repo | baseline |", "| base-fim | fim (dummy=blank) |"):  # fmt: skip
        assert row in report, row
    assert "the shipped pair `tiny-kv-dip-continued`" in report and (out / "repo_positions_last_layer.png").is_file()
    train = yaml.safe_load((out / "configs" / "train-repo.yaml").read_text())
    assert train["model"]["init_from"] == str(site / "workflows" / "assets" / "tiny-kv-dip-continued" / "repo")
    commands = (out / "commands.sh").read_text()
    assert f"cd {work}\n" in commands and "-m repo_train fit --config" in commands and "-m search run" in commands
    (entry_points,) = site.glob("repo_train-*.dist-info/entry_points.txt")
    assert "repo-workflows = workflows.cli:main" in entry_points.read_text()
