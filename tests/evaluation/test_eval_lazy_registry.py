"""The method registry knows the built-ins by class path and imports one only when it is read; the task
classes declare their columns without `datasets` (both so that `evaluation run` resolves its config fast)."""

from __future__ import annotations

import json.decoder
from dataclasses import dataclass
from typing import ClassVar

import datasets
import pytest

from evaluation.methods import METHODS, Method, MethodStack, register_method
from evaluation.methods.registry import LazyClassRegistry
from evaluation.tasks import build_task
from evaluation.tasks.base import feature_of


def test_an_entry_given_as_a_class_path_is_imported_when_read():
    registry = LazyClassRegistry("thing", {"decoder": "json.decoder.JSONDecoder"})
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

    with pytest.raises(ValueError, match="'lpes' registered twice"):
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
