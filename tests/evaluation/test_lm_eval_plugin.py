"""The `repo-train` lm-eval model as a plugin: declared in the package metadata's `lm_eval.models` entry-point group
(what an lm-eval with backend discovery reads after `pip install`), resolving to the registered class; and the
route that works with an lm-eval without discovery (0.4.13): `python -m evaluation lm-eval ...`.

The metadata is read from the source tree's setup.cfg, not from the installed distribution: the venv holds an
editable install made from another checkout, whose metadata need not be this tree's.
"""

from __future__ import annotations

import configparser
import importlib.metadata
from pathlib import Path

import pytest

SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"
GROUP = "lm_eval.models"


def declared_entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of `group` as setup.cfg declares them (`name = module:attr`, one a line)."""
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    lines = parser.get("options.entry_points", group, fallback="").strip().splitlines()
    points = []
    for line in lines:
        name, _, value = line.partition("=")
        points.append(importlib.metadata.EntryPoint(name.strip(), value.strip(), group))
    return points


def test_the_model_type_is_declared_in_the_lm_eval_models_group():
    points = declared_entry_points(GROUP)
    assert [(p.name, p.value) for p in points] == [("repo-train", "evaluation.lm_eval_model:RepoTrainLM")]


@pytest.mark.usefixtures("lm_eval_installed", "one_thread")
def test_the_entry_point_resolves_to_the_class_lm_eval_registers():
    from lm_eval.api.registry import get_model

    (point,) = declared_entry_points(GROUP)
    loaded = point.load()  # what a discovering lm-eval does: import the module, take the attribute
    assert loaded.__name__ == "RepoTrainLM" and loaded.__module__ == "evaluation.lm_eval_model"
    assert get_model("repo-train") is loaded  # importing the module registered the same class under the name


def test_the_readme_and_docs_name_the_route_for_an_lm_eval_without_discovery():
    """lm-eval 0.4.13 reads no entry points: the docs say so and give the command that registers the model first
    (that command itself runs in test_eval_lm_eval_model.py::test_the_command_passes_argv_to_lm_eval...)."""
    root = SETUP_CFG.parent
    for doc in (root / "README.md", root / "docs" / "evaluation.md"):
        text = doc.read_text()
        assert "python -m evaluation lm-eval run --model repo-train" in text, doc
        assert "lm_eval.models" in text, doc
