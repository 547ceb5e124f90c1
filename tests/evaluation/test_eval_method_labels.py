"""Short method labels: the name and its non-default parameters, never a path."""

from __future__ import annotations

import pytest

from evaluation.method_labels import method_label, short_label, short_labels

QUICKSTART_SPECS = {
    "baseline": "baseline",
    "lpes:scale_file=/tmp/x/outputs/quickstart/scales/rope-kv.json": "lpes (rope-kv)",
    "pi:scale=1.5": "pi (scale=1.5)",
    "caliope:calibrator=hourglass,delta_min=5,delta_max=1000,boundaries=spans": "caliope (hourglass, delta=5–1000)",
    "fim:temperature=5e-05,layers=last_half,score_layers=all,target=mean,dummy=blank,calibration_batch=0": (
        "fim (dummy=blank)"
    ),
    "pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30": "pcd",
}


@pytest.mark.parametrize("spec, label", QUICKSTART_SPECS.items())
def test_the_quickstart_methods_get_short_labels(spec, label) -> None:
    assert short_label(spec) == label


@pytest.mark.parametrize(
    "spec, label",
    [
        ("pcd:alpha=0.3,beta=2.5,ratio=1e-4,gamma=30", "pcd (alpha=0.3)"),  # 1e-4 equals the default 0.0001
        ("lpes:scale_file=rope-kv.json", "lpes (rope-kv)"),  # a file name without a directory
        ("lpes:scale_file=C:\\runs\\scales\\repo-mdqa.json", "lpes (repo-mdqa)"),
        ("ms_poe:min_ratio=1.1,max_ratio=2,start_layer=2,head_order=outlier", "ms_poe (ratio=1.1–2)"),
        ("attention_buckets:bases=10000|20000,combine=confidence", "attention_buckets (bases=10000|20000)"),
        ("my_method:weights=/data/run3/probe.pt,k=1", "my_method (weights=probe, k=1)"),  # unregistered: all kept
        ("not a spec!", "not a spec!"),
    ],
)
def test_only_parameters_that_differ_from_the_defaults_are_shown(spec, label) -> None:
    assert method_label(spec) == label


def test_a_stack_joins_the_labels_of_its_methods() -> None:
    spec = "caliope:calibrator=moses,delta_gap=10000,boundaries=spans+pi:scale=2"
    assert short_label(spec) == "caliope (moses, delta_gap=10000) + pi (scale=2)"
    assert short_label("pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30+pi:scale=1e+3") == "pcd + pi (scale=1000)"


def test_labels_stay_distinct_and_hold_no_path() -> None:
    specs = [*QUICKSTART_SPECS, "lpes:scale_file=/a/rope-kv.json", "lpes:scale_file=/b/rope-kv.json", "pcd"]
    labels = short_labels(specs)
    assert labels["lpes:scale_file=/tmp/x/outputs/quickstart/scales/rope-kv.json"] == "lpes (rope-kv) [1]"
    assert labels["lpes:scale_file=/a/rope-kv.json"] == "lpes (rope-kv) [2]"
    assert labels["lpes:scale_file=/b/rope-kv.json"] == "lpes (rope-kv) [3]"
    assert labels["pcd"] == labels["pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30"] == "pcd"  # same method: one label
    assert len(set(labels.values())) == len(labels) - 1  # every configuration has its own label
    assert not any("/" in label or "\\" in label for label in labels.values())
