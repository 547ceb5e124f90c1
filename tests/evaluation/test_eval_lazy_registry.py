"""The method registry knows the built-ins by class path and imports one only when it is read; the task
classes declare their columns without `datasets` (both so that `evaluation run` resolves its config fast)."""

from __future__ import annotations

import json.decoder
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import datasets
import pytest

from evaluation.methods import METHODS, Method, MethodStack, register_method
from evaluation.tasks import build_task
from evaluation.tasks.base import feature_of
from repo_common.registry import Registry

ROOT = Path(__file__).resolve().parents[2]


def test_an_entry_given_as_a_class_path_is_imported_when_read():
    registry = Registry("thing", {"decoder": "json.decoder.JSONDecoder"})
    assert "decoder" in registry and list(registry) == ["decoder"] and len(registry) == 1
    assert registry.class_path("decoder") == "json.decoder.JSONDecoder"
    assert registry["decoder"] is json.decoder.JSONDecoder
    assert registry.class_path("decoder") == "json.decoder.JSONDecoder"  # the same once loaded
    assert registry.holds("decoder", json.decoder.JSONDecoder) and registry.holds("free", int)
    assert not registry.holds("decoder", json.decoder.JSONDecodeError)


def test_a_built_in_read_by_name_is_the_class_its_module_registered():
    from evaluation.methods.pi import PositionInterpolation

    assert METHODS["pi"] is PositionInterpolation
    assert MethodStack.parse("pi:scale=2").label == "pi:scale=2"
    assert METHODS.class_path("caliope") == "evaluation.methods.caliope.Caliope"


def test_a_user_method_may_not_take_a_built_in_name_even_before_the_built_in_is_loaded(monkeypatch):
    monkeypatch.setattr(METHODS, "_entries", {**METHODS._entries, "lpes": "evaluation.methods.lpes.method.X"})

    @dataclass
    class Impostor(Method):
        name: ClassVar[str] = "lpes"

    with pytest.raises(ValueError, match="method 'lpes' is already evaluation.methods.lpes.method.X; give Impostor"):
        register_method(Impostor)


def test_a_user_method_registers_as_a_class(monkeypatch):
    monkeypatch.setattr(METHODS, "_entries", dict(METHODS._entries))

    @dataclass
    class Nudge(Method):
        name: ClassVar[str] = "nudge_for_test"
        amount: float = 1.0

    assert register_method(Nudge) is Nudge and METHODS["nudge_for_test"] is Nudge
    assert METHODS.class_path("nudge_for_test").endswith("Nudge")
    assert MethodStack.parse("nudge_for_test:amount=2").label == "nudge_for_test:amount=2"


def test_column_types_become_the_datasets_features_they_name():
    assert feature_of("int64") == datasets.Value("int64")
    assert feature_of([["int64"]]) == datasets.List(datasets.List(datasets.Value("int64")))
    assert feature_of(datasets.Value("string")) == datasets.Value("string")  # a user's feature, as it is
    built = build_task("kv", num_examples=1, num_keys=3, gold_positions=[0]).build()
    assert built.features["item_spans"] == datasets.List(datasets.List(datasets.Value("int64")))
    assert built.features["key"] == datasets.Value("string") and built.features["source_index"].dtype == "int64"


@pytest.mark.slow  # a fresh interpreter that loads torch (~11 s)
def test_a_built_in_named_by_its_bare_class_name_in_a_config_is_loaded_for_the_parser(tmp_path):
    """`class_path: PositionInterpolation` worked while every built-in was imported eagerly; it still does."""
    registry = Registry("thing", {"decoder": "json.decoder.JSONDecoder"})
    registry.load_class_named("JSONEncoder")  # no entry of that class: nothing is loaded
    assert isinstance(registry._entries["decoder"], str)
    registry.load_class_named("JSONDecoder")
    assert registry._entries["decoder"] is json.decoder.JSONDecoder
    config = tmp_path / "methods.yaml"
    config.write_text("methods:\n  - class_path: PositionInterpolation\n    init_args: {scale: 2.0}\n")
    # a fresh interpreter, where no built-in is loaded yet (here earlier tests may have loaded it)
    shown = subprocess.run(
        [sys.executable, "-m", "evaluation", "run", "--config", str(config), "--print_config"],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "class_path: evaluation.methods.pi.PositionInterpolation" in shown.stdout
