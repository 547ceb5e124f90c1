"""`RePoDataModule` takes typed data sources: what it saves, what it refuses, how the CLI writes them."""

from __future__ import annotations

import pytest
import yaml

from repo_train.data import DataSource, OlmoNumpyData, SyntheticData
from repo_train.training.cli import TINY_TRAINER_DEFAULTS, _ParseOnlyCLI
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule


def test_sources_are_saved_as_plain_class_path_mappings():
    source, val = SyntheticData(seq_len=16, num_samples=8), SyntheticData(seq_len=16, num_samples=4, seed=1)
    data = RePoDataModule(train=source, val=val)
    assert data.train_source is source and data.val_source is val
    assert data.hparams.train == source.to_config() and data.hparams.val == val.to_config()  # no objects in ckpts
    assert data.hparams_initial.train == source.to_config()  # what the logger writes
    default = RePoDataModule()
    assert default.train_source == SyntheticData() and default.val_source is None
    assert default.hparams.train is None and default.hparams.val is None  # as given, like LightningCLI's config
    mapping = RePoDataModule(train={"class_path": "SyntheticData", "init_args": {"seq_len": 16, "num_samples": 8}})
    assert mapping.train_source == source and mapping.hparams.train == source.to_config()


def test_an_old_source_dict_is_refused_with_its_replacement():
    with pytest.raises(ValueError) as info:
        RePoDataModule(train={"source": "synthetic", "seq_len": 16})
    assert str(info.value).startswith(
        "data.train: the 'source:' form was replaced by class_path + init_args; write "
        "{class_path: repo_train.data.SyntheticData, init_args: {seq_len: 16}}"
    )
    with pytest.raises(ValueError, match=r"^data\.val: class_path 'Wiki' is not a data source"):
        RePoDataModule(val={"class_path": "Wiki"})


def test_the_data_state_resumes_from_either_form_and_refuses_other_data():
    data = RePoDataModule(train=SyntheticData(seq_len=16, num_samples=8))
    data._consumed = 12
    state = data.state_dict()
    assert state == {"consumed_samples": 12, "train": SyntheticData(seq_len=16, num_samples=8).to_config()}
    for saved in (state, {"consumed_samples": 12, "train": {"source": "synthetic", "seq_len": 16, "num_samples": 8}}):
        again = RePoDataModule(train=SyntheticData(seq_len=16, num_samples=8))
        again.load_state_dict(saved)
        assert again.consumed_samples() == 12
    with pytest.raises(ValueError, match="the checkpoint was trained on a different data config"):
        RePoDataModule(train=SyntheticData(seq_len=32, num_samples=8)).load_state_dict(state)


def _parse(*args: str):
    cli = _ParseOnlyCLI(RePoLightningModule, RePoDataModule, trainer_defaults=TINY_TRAINER_DEFAULTS, run=False,
                        seed_everything_default=42, args=list(args))  # fmt: skip
    return cli.parser, cli.config


def test_the_command_line_names_sources_by_class_and_dumps_them_as_yaml(tmp_path):
    parser, config = _parse(
        "--data.train", "OlmoNumpyData", "--data.train.mix_file", "mix.txt",
        "--data.val", "SyntheticData", "--data.val.seq_len", "64",
    )  # fmt: skip
    dumped = yaml.safe_load(parser.dump(config))["data"]
    assert dumped["train"]["class_path"] == "repo_train.data.OlmoNumpyData"  # the short name resolved
    assert DataSource.from_config(dumped["train"]) == OlmoNumpyData(mix_file="mix.txt")  # its defaults, not another's
    assert dumped["val"] == SyntheticData(seq_len=64).to_config()
    # the dump is a config file again (what --print_config prints and config.yaml holds)
    (tmp_path / "run.yaml").write_text(parser.dump(config))
    _, again = _parse("--config", str(tmp_path / "run.yaml"))
    assert again.data == config.data
