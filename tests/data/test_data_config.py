"""Configs: dict round trips, the registry, documented fields, model vocab check."""

import ast
import inspect
import itertools
from dataclasses import fields

import numpy as np
import pytest
import torch

import repo_train.data.config as config_module
from repo_train.data import (
    DATA_SOURCES,
    OlmoNumpyDataConfig,
    SyntheticDataConfig,
    SyntheticDataset,
    TextDataConfig,
    build_data_source,
)

CONFIGS = [
    SyntheticDataConfig(num_samples=12, seq_len=33, seed=4, kv_weight=2.5),
    OlmoNumpyDataConfig(paths=["a/*.npy", "b.npy"], mix_file="mix.txt", seq_len=2048, dtype="uint32", seed=1),
    TextDataConfig(tokenizer="tok", paths=["x.jsonl"], text_field="body", seq_len=64, vocab_size=100),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.source)
def test_to_dict_from_dict_round_trip(config):
    data = config.to_dict()
    assert data["source"] == config.source
    assert set(data) == {"source"} | {f.name for f in fields(config)}
    again = type(config).from_dict(data)
    assert again == config and again.to_dict() == data
    data["paths" if "paths" in data else "seq_len"] = ["changed"] if "paths" in data else 7
    assert config.to_dict() != data  # to_dict hands out a copy


def test_from_dict_rejects_unknown_keys_and_other_sources():
    with pytest.raises(ValueError, match=r"unknown synthetic data option\(s\) \['seqlen'\]; valid options are"):
        SyntheticDataConfig.from_dict({"seqlen": 5})
    with pytest.raises(ValueError, match="reads source 'text', got 'synthetic'"):
        TextDataConfig.from_dict({"source": "synthetic"})


def test_registry_builds_from_a_dict_or_a_config():
    assert set(DATA_SOURCES) == {"synthetic", "olmo_numpy", "text", "prompt_completion"}
    built = build_data_source({"source": "synthetic", "num_samples": 3, "seq_len": 10, "seed": 2})
    assert isinstance(built, SyntheticDataset) and len(built) == 3 and built.seq_len == 10
    direct = SyntheticDataset(num_samples=3, seq_len=10, seed=2)
    assert torch.equal(built[2]["input_ids"], direct[2]["input_ids"])
    assert build_data_source(SyntheticDataConfig(num_samples=2)).num_samples == 2
    np.testing.assert_array_equal(built.order(1), direct.order(1))
    with pytest.raises(
        ValueError,
        match=r"unknown data source 'wiki'.*one of \['olmo_numpy', 'prompt_completion', 'synthetic', 'text'\]",
    ):
        build_data_source({"source": "wiki"})


def test_every_config_field_has_a_one_line_docstring():
    tree = ast.parse(inspect.getsource(config_module))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls in (SyntheticDataConfig, OlmoNumpyDataConfig, TextDataConfig):
        body = classes[cls.__name__].body
        documented = {
            statement.target.id
            for statement, following in itertools.pairwise(body)
            if isinstance(statement, ast.AnnAssign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and "\n" not in following.value.value.strip()
        }
        assert {f.name for f in fields(cls)} <= documented, cls.__name__


def test_model_vocab_size_is_checked_against_the_data():
    dataset = SyntheticDataset(num_samples=1, seq_len=4)
    dataset.check_model_vocab_size(256)
    with pytest.raises(ValueError, match="vocab_size=200 but the data uses token ids up to 255"):
        dataset.check_model_vocab_size(200)
