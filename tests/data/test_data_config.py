"""Data sources as typed classes: {class_path, init_args} round trips, old `source:` dicts, documented fields."""

import ast
import inspect
import itertools
from dataclasses import dataclass, fields

import numpy as np
import pytest
import torch

import repo_train.data.config as config_module
from repo_train.data import (
    BUILT_IN_SOURCES,
    DataSource,
    OlmoNumpyData,
    PromptCompletionData,
    SyntheticData,
    SyntheticDataset,
    TextData,
    legacy_source_message,
)

SOURCES = [
    SyntheticData(num_samples=12, seq_len=33, seed=4, kv_weight=2.5),
    OlmoNumpyData(paths=["a/*.npy", "b.npy"], mix_file="mix.txt", seq_len=2048, dtype="uint32", seed=1),
    TextData(tokenizer="tok", paths=["x.jsonl"], text_field="body", seq_len=64, vocab_size=100),
    PromptCompletionData(tokenizer="tok", paths=["pc.jsonl"], seq_len=40, completion_field="answer"),
]


@dataclass
class RepeatedTokens(DataSource):
    """A source defined outside the package: one token repeated (the class path is all a config needs)."""

    seq_len: int = 8
    """Tokens per sequence."""

    def build(self) -> SyntheticDataset:
        return SyntheticDataset(num_samples=2, seq_len=self.seq_len)


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: type(s).__name__)
def test_to_config_from_config_round_trip(source):
    config = source.to_config()
    assert config["class_path"] == f"repo_train.data.{type(source).__name__}"
    assert set(config["init_args"]) == {f.name for f in fields(source)}
    again = DataSource.from_config(config)
    assert again == source and type(again) is type(source) and again.to_config() == config
    config["init_args"]["seq_len"] = 7
    assert source.to_config()["init_args"]["seq_len"] == source.seq_len  # to_config hands out a copy


def test_class_paths_short_long_and_from_outside_the_package():
    short = DataSource.from_config({"class_path": "SyntheticData", "init_args": {"seq_len": 9}})
    long = DataSource.from_config({"class_path": "repo_train.data.config.SyntheticData", "init_args": {"seq_len": 9}})
    assert short == long == SyntheticData(seq_len=9)
    assert DataSource.from_config({"class_path": "SyntheticData"}) == SyntheticData()  # init_args optional
    outside = RepeatedTokens(seq_len=5)
    assert outside.to_config()["class_path"] == f"{__name__}.RepeatedTokens"
    assert DataSource.from_config(outside.to_config()) == outside
    assert DataSource.from_config({"class_path": "RepeatedTokens"}).build().seq_len == 8
    assert DataSource.from_config(outside) is outside  # an object is taken as it is


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"class_path": "SyntheticData", "init_args": {"seqlen": 5}},
            r"data\.train\.init_args: unknown SyntheticData option\(s\) \['seqlen'\]; valid options are .*'seq_len'",
        ),
        ({"class_path": "Wiki"}, r"data\.train: class_path 'Wiki' is not a data source; name one of SyntheticData,"),
        ({"class_path": "repo_train.data.SyntheticDataset"}, "'repo_train.data.SyntheticDataset' is not a data source"),
        ({"class_path": "no_such_module.Source"}, "'no_such_module.Source' is not a data source"),
        ({"class_path": "DataSource"}, "'DataSource' is not a data source"),
        ({"init_args": {"seq_len": 5}}, r"data\.train: no class_path; a data source is \{class_path"),
        ({"class_path": "SyntheticData", "seq_len": 5}, r"unknown key\(s\) \['seq_len'\]"),
        ("synthetic", "expected a data source .* got 'synthetic'"),
    ],
)
def test_from_config_refuses_bad_input_in_one_line(config, message):
    with pytest.raises(ValueError, match=message) as info:
        DataSource.from_config(config, "data.train")
    assert "\n" not in str(info.value)


def test_an_old_source_dict_given_as_configuration_says_what_replaced_it():
    with pytest.raises(ValueError) as info:
        DataSource.from_config({"source": "olmo_numpy", "mix_file": "m.txt", "seq_len": 64}, "data.val")
    assert str(info.value) == (
        "data.val: the 'source:' form was replaced by class_path + init_args; write "
        "{class_path: repo_train.data.OlmoNumpyData, init_args: {mix_file: m.txt, seq_len: 64}} "
        "(docs/configuring.md lists the sources)"
    )
    unknown = legacy_source_message({"source": "wiki", "seq_len": 64})
    assert "('wiki' was not a source either)" in unknown
    assert "repo_train.data.SyntheticData|OlmoNumpyData|TextData|PromptCompletionData" in unknown


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: type(s).__name__)
def test_old_checkpoint_dicts_convert_to_the_same_source(source):
    old = {"source": type(source).legacy_name, **source.to_config()["init_args"]}
    assert DataSource.from_legacy_dict(old) == source
    assert DataSource.from_saved(old) == DataSource.from_saved(source.to_config()) == source


def test_a_checkpoint_cannot_make_the_resume_check_import_a_module(tmp_path, monkeypatch):
    """A checkpoint's class_path is looked up among loaded sources, never imported (an import runs code)."""
    (tmp_path / "planted_source.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('ran').write_text('imported')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="'planted_source.Data' is not a data source"):
        DataSource.from_saved({"class_path": "planted_source.Data", "init_args": {}})
    assert not (tmp_path / "ran").exists()
    # the built-in sources, under every name configs write, still resolve
    for name in ("repo_train.data.SyntheticData", "repo_train.data.config.SyntheticData", "SyntheticData"):
        assert DataSource.from_saved({"class_path": name, "init_args": {"seq_len": 8}}) == SyntheticData(seq_len=8)


def test_old_dicts_keep_defaults_and_refuse_what_was_never_valid():
    assert DataSource.from_legacy_dict({"source": "synthetic", "seq_len": 16}) == SyntheticData(seq_len=16)
    assert DataSource.from_saved(None) is None
    with pytest.raises(ValueError, match=r"unknown data source 'wiki'.*\['olmo_numpy', 'prompt_completion', 'synthe"):
        DataSource.from_legacy_dict({"source": "wiki"})
    with pytest.raises(ValueError, match=r"the old synthetic data dict: unknown SyntheticData option\(s\) \['x'\]"):
        DataSource.from_legacy_dict({"source": "synthetic", "x": 1})
    legacy = {cls.legacy_name for cls in BUILT_IN_SOURCES} - {None}  # sources added since have no old name
    assert legacy == {"synthetic", "olmo_numpy", "text", "prompt_completion"}
    with pytest.raises(ValueError, match="unknown data source None"):  # not the first source without one
        DataSource.from_legacy_dict({"source": None, "seq_len": 16})


def test_build_makes_the_dataset_the_options_describe():
    built = SyntheticData(num_samples=3, seq_len=10, seed=2).build()
    assert isinstance(built, SyntheticDataset) and len(built) == 3 and built.seq_len == 10
    direct = SyntheticDataset(num_samples=3, seq_len=10, seed=2)
    assert torch.equal(built[2]["input_ids"], direct[2]["input_ids"])
    np.testing.assert_array_equal(built.order(1), direct.order(1))
    with pytest.raises(ValueError, match="seq_len must be an integer >= 2"):
        SyntheticData(seq_len=1).build()  # the dataset's checks hold for the source


def test_every_source_field_has_a_one_line_docstring():
    """The options' reference is the class itself (`--data.train.help CLASS` lists names, types and defaults)."""
    tree = ast.parse(inspect.getsource(config_module))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for cls in BUILT_IN_SOURCES:
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
