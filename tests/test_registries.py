"""Every pluggable part is named through one kind of registry (`repo_common.registry.Registry`), each with its
decorator: tasks, position methods, trainable position policies, model presets and training data sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from evaluation.methods import METHODS, Method, register_method
from evaluation.tasks import TASKS, Task, build_task, register_task, task_name_of
from repo_common.registry import Registry
from repo_train.data import DATA_SOURCES, DataSource, SyntheticData, register_data_source, source_class
from repo_train.modeling import POSITION_POLICIES
from repo_train.modeling.policy import RopePolicy, register_policy
from repo_train.modeling.presets import PRESETS, preset, register_preset, tiny

REGISTRIES = {"task": TASKS, "method": METHODS, "position policy": POSITION_POLICIES, "model preset": PRESETS,
              "data source": DATA_SOURCES}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_each_kind_of_part_is_a_registry_whose_unknown_names_are_one_line(kind):
    registry = REGISTRIES[kind]
    assert isinstance(registry, Registry) and registry.kind == kind and len(registry) >= 3
    with pytest.raises(ValueError) as refused:
        registry.lookup("no_such_part")
    assert str(refused.value) == f"unknown {kind} 'no_such_part'; registered {kind}s are {sorted(registry)}"


def test_a_part_of_each_kind_is_added_by_its_decorator_and_a_taken_name_refused(registries_restored):
    @register_task
    @dataclass(kw_only=True)
    class Probe(Task):
        name: ClassVar[str] = "probe_task"

        def rows(self):
            yield from ()

    @register_method
    @dataclass
    class Nudge(Method):
        name: ClassVar[str] = "nudge"

    @register_policy
    class Twin(RopePolicy):
        name = "rope_twin"

    @register_preset("tiny-twin")
    def tiny_twin(**overrides):
        return tiny(num_hidden_layers=2, **overrides)

    @register_data_source
    @dataclass
    class Echo(SyntheticData):
        pass

    assert build_task("probe_task").name == "probe_task" and METHODS.lookup("nudge") is Nudge
    assert POSITION_POLICIES["rope_twin"] is Twin and preset("tiny-twin").num_hidden_layers == 2
    assert source_class("Echo") is Echo and issubclass(DATA_SOURCES["Echo"], DataSource)
    with pytest.raises(ValueError, match="task 'mdqa' is already evaluation.tasks.mdqa.MDQATask; give Clash"):

        @register_task
        @dataclass(kw_only=True)
        class Clash(Task):
            name: ClassVar[str] = "mdqa"

            def rows(self):
                yield from ()

    with pytest.raises(ValueError, match="model preset 'tiny' is already"):
        register_preset("tiny")(tiny_twin)


def test_a_registry_names_what_it_holds_without_importing_it(registries_restored):
    """`Registry.name_of`: the name of a class held or listed by its import path (not imported), else None; the
    harness and the search name a task given by class_path through it (`task_name_of`), registering it once."""
    lazy = Registry("part", {"probe": "no_such_module.Probe", "mdqa": TASKS["mdqa"]})
    assert lazy.name_of(TASKS["mdqa"]) == "mdqa" and lazy.name_of(Registry) is None
    assert lazy.class_path("probe") == "no_such_module.Probe"  # still an import path: nothing was imported

    @dataclass(kw_only=True)
    class Unlisted(Task):
        name: ClassVar[str] = "unlisted_task"

        def rows(self):
            yield from ()

    assert TASKS.name_of(Unlisted) is None
    assert task_name_of(Unlisted) == "unlisted_task" and TASKS["unlisted_task"] is Unlisted
    assert task_name_of(Unlisted) == "unlisted_task"  # registered once, then found
