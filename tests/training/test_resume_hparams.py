"""Resuming with `--ckpt_path`: the checkpoint's saved hyperparameters against the given ones (issue 13, item 7).

Lightning's CLI used to load the checkpoint's model hyperparameters over the
command line's, silently (`fit --ckpt_path X --model.lr 0.1` trained with the
saved lr), and to ignore the data module's (a resume without the original
`--data.*` options read other data). Now: saved values fill in what was not
given; a given value that differs is an error naming it, unless
`--allow_hparam_changes true`, which makes the given value win (for real: the
restored optimizer and schedule take it). The refusals are rows of
tests/test_bad_inputs_training.py; the decisions and a real resume are here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from repo_train.data import OlmoNumpyData, SyntheticData
from repo_train.modeling.repo_policy import RepoPosition
from repo_train.training.checks import compare_resume_hparams

#: What LightningCLI saves: the data source as the parsed config, {class_path, init_args} with every option.
SAVED = {
    "model": {"position": "repo", "lr": 0.01, "betas": (0.9, 0.95), "init_from": None},
    "data": {"train": SyntheticData(seq_len=16).to_config(), "global_batch_size": 4, "micro_batch_size": 4},
}
#: The same run saved before data sources were classes.
SAVED_OLD = {**SAVED, "data": {**SAVED["data"], "train": {"source": "synthetic", "seq_len": 16}}}


def test_values_not_given_are_resumed_as_saved():
    take, warning = compare_resume_hparams("x.ckpt", SAVED, {"model": {}, "data": {}}, allow_changes=False)
    assert take == SAVED and warning is None


def test_equal_values_are_no_conflict_whatever_their_container():
    given = {"model": {"betas": [0.9, 0.95], "lr": 0.01}, "data": {}}
    take, warning = compare_resume_hparams("x.ckpt", SAVED, given, allow_changes=False)
    assert "lr" not in take["model"] and warning is None


@pytest.mark.parametrize("saved", [SAVED, SAVED_OLD], ids=["saved-as-class", "saved-as-old-source-dict"])
@pytest.mark.parametrize(
    "train",
    [
        {"class_path": "SyntheticData", "init_args": {"seq_len": 16}},  # short path, defaults left out
        {"class_path": "repo_train.data.config.SyntheticData", "init_args": {"seq_len": 16, "seed": 0}},
        SyntheticData(seq_len=16).to_config(),
    ],
    ids=["short", "module-path", "full"],
)
def test_the_same_data_source_is_no_conflict_however_written_or_saved(saved, train):
    given = {"model": {}, "data": {"train": train}}
    take, warning = compare_resume_hparams("x.ckpt", saved, given, allow_changes=False)
    assert "train" not in take["data"] and warning is None


def test_an_old_checkpoint_resumes_its_source_in_the_new_form():
    take, _ = compare_resume_hparams("x.ckpt", SAVED_OLD, {"model": {}, "data": {}}, allow_changes=False)
    assert take["data"]["train"] == SyntheticData(seq_len=16).to_config()  # what the parser takes back
    unset = {**SAVED, "data": {**SAVED["data"], "train": None}}  # the CLI's default (None) is SyntheticData()
    given = {"model": {}, "data": {"train": {"class_path": "SyntheticData"}}}
    assert compare_resume_hparams("x.ckpt", unset, given, allow_changes=False)[1] is None


def test_a_different_value_is_an_error_naming_key_values_and_the_way_out():
    given = {"model": {"lr": 0.1}, "data": {"micro_batch_size": 2}}
    with pytest.raises(ValueError) as info:
        compare_resume_hparams("x.ckpt", SAVED, given, allow_changes=False)
    assert str(info.value) == (
        "--ckpt_path x.ckpt was saved with other values than given: model.lr = 0.01 in the checkpoint, 0.1 given; "
        "data.micro_batch_size = 4 in the checkpoint, 2 given. Nothing was started: drop these options to resume "
        "with the checkpoint's values, or add --allow_hparam_changes true to make the given values win."
    )


def test_allowed_changes_win_with_a_one_line_warning():
    given = {"model": {"lr": 0.1}, "data": {}}
    take, warning = compare_resume_hparams("x.ckpt", SAVED, given, allow_changes=True)
    assert "lr" not in take["model"] and take["model"]["position"] == "repo"
    assert warning == (
        "warning: --allow_hparam_changes: the given values win over the checkpoint's in this resume of x.ckpt: "
        "model.lr = 0.01 in the checkpoint, 0.1 given"
    )


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("model", "position", "rope"),
        ("model", "position", {"class_path": "RepoPosition", "init_args": {"start_layer": 0}}),
        ("data", "global_batch_size", 8),
        ("data", "train", {"class_path": "SyntheticData", "init_args": {"seq_len": 32}}),
        ("data", "train", OlmoNumpyData(mix_file="mix.txt", seq_len=16).to_config()),
    ],
)
@pytest.mark.parametrize("saved", [SAVED, SAVED_OLD], ids=["saved-as-class", "saved-as-old-source-dict"])
def test_what_the_weights_and_data_position_depend_on_never_changes(section, key, value, saved):
    given = {"model": {}, "data": {}, section: {key: value}}
    with pytest.raises(
        ValueError, match=rf"cannot resume with other values .* {section}\.{key} = .*--model\.init_from"
    ):
        compare_resume_hparams("x.ckpt", saved, given, allow_changes=True)


def test_a_positions_other_options_may_change_and_an_old_checkpoints_method_is_the_same_position():
    curriculum = {"class_path": "RepoPosition", "init_args": {"curriculum_start": 1.0, "curriculum_steps": 8}}
    with pytest.raises(ValueError, match=r"was saved with other values than given: model\.position = "):
        compare_resume_hparams("x.ckpt", SAVED, {"model": {"position": curriculum}, "data": {}}, allow_changes=False)
    take, warning = compare_resume_hparams("x.ckpt", SAVED, {"model": {"position": curriculum}}, allow_changes=True)
    assert "position" not in take["model"] and "curriculum_steps': 8" in warning
    old = {**SAVED, "model": {"position_method": "repo", "repo_start_layer": None, "position_options": {}}}
    for given in ("repo", {"class_path": "repo_train.modeling.RepoPosition"}):
        take, warning = compare_resume_hparams("x.ckpt", old, {"model": {"position": given}}, allow_changes=False)
        assert warning is None and "position" not in take["model"]
    take, _ = compare_resume_hparams("x.ckpt", old, {"model": {}}, allow_changes=False)
    assert take["model"] == {"position": RepoPosition().to_config()}  # the old keys, in today's spelling


def test_a_checkpoint_data_source_that_cannot_be_read_is_one_line():
    broken = {**SAVED, "data": {**SAVED["data"], "train": {"source": "wiki"}}}
    with pytest.raises(
        ValueError, match=r"^--ckpt_path x\.ckpt: data\.train cannot be read \(unknown data source 'wiki'"
    ):
        compare_resume_hparams("x.ckpt", broken, {"model": {}, "data": {}}, allow_changes=False)


@pytest.mark.slow  # two short Lightning runs in this process (~10 s)
def test_a_real_resume_takes_saved_values_and_allowed_changes_take_effect(tmp_path, monkeypatch, capsys, one_thread):
    from repo_train.training.cli import TINY_TRAINER_DEFAULTS, RePoCLI
    from repo_train.training.datamodule import RePoDataModule
    from repo_train.training.module import RePoLightningModule

    monkeypatch.setattr(sys, "argv", ["python -m repo_train"])
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false", "--trainer.accelerator", "cpu"]

    def cli(*args):
        return RePoCLI(
            RePoLightningModule,
            RePoDataModule,
            trainer_defaults=TINY_TRAINER_DEFAULTS,
            args=["fit", *quiet, *args],
            parser_kwargs={"exit_on_error": False},
        )

    first = cli(
        "--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path / "a"), "--model.lr", "0.01",
        "--data.train", "SyntheticData", "--data.train.seq_len", "16", "--data.train.num_samples", "64",
        "--data.global_batch_size", "4", "--data.micro_batch_size", "2", "--checkpoint.every_n_train_steps", "2",
    )  # fmt: skip
    checkpoint = str(first.trainer.checkpoint_callback.last_model_path)
    # a plain resume: model AND data values come from the checkpoint (the data ones were ignored before)
    plain = cli(
        "--ckpt_path", checkpoint, "--trainer.max_steps", "4", "--trainer.default_root_dir", str(tmp_path / "b")
    )
    assert plain.model.hparams.lr == 0.01 and plain.trainer.global_step == 4
    assert plain.datamodule.hparams.micro_batch_size == 2
    assert plain.datamodule.train_source == SyntheticData(seq_len=16, num_samples=64)
    assert plain.trainer.lr_scheduler_configs[0].scheduler.base_lrs == [0.01, 0.01]
    capsys.readouterr()
    # an allowed change is announced in one line and really used by the restored optimizer and schedule
    changed = cli(
        "--ckpt_path", checkpoint, "--trainer.max_steps", "4", "--trainer.default_root_dir", str(tmp_path / "c"),
        "--model.lr", "0.002", "--model.weight_decay", "0.05", "--allow_hparam_changes", "true",
    )  # fmt: skip
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--allow_hparam_changes" in line]
    assert len(warnings) == 1 and "model.lr = 0.01 in the checkpoint, 0.002 given" in warnings[0]
    assert "model.weight_decay = 0.1 in the checkpoint, 0.05 given" in warnings[0]
    groups = changed.trainer.optimizers[0].param_groups
    assert [g["initial_lr"] for g in groups] == [0.002, 0.002] and [g["weight_decay"] for g in groups] == [0.05, 0.0]
    assert changed.trainer.lr_scheduler_configs[0].scheduler.base_lrs == [0.002, 0.002]


@pytest.mark.slow  # two short Lightning runs in this process (~10 s)
def test_a_checkpoint_holds_plain_data_and_one_from_before_typed_sources_still_resumes(
    tmp_path, monkeypatch, capsys, one_thread
):
    import torch

    from repo_train.checkpoints import read_hyperparameters
    from repo_train.training.cli import TINY_TRAINER_DEFAULTS, RePoCLI
    from repo_train.training.datamodule import RePoDataModule
    from repo_train.training.module import RePoLightningModule

    monkeypatch.setattr(sys, "argv", ["python -m repo_train"])
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false", "--trainer.accelerator", "cpu"]
    data = ["--data.train", "SyntheticData", "--data.train.seq_len", "16", "--data.train.num_samples", "64"]

    def cli(root, *args):
        return RePoCLI(
            RePoLightningModule,
            RePoDataModule,
            trainer_defaults=TINY_TRAINER_DEFAULTS,
            args=["fit", *quiet, "--trainer.default_root_dir", str(tmp_path / root), *args],
            parser_kwargs={"exit_on_error": False},
        )

    batch = ["--data.global_batch_size", "4", "--data.micro_batch_size", "2", "--checkpoint.every_n_train_steps", "2"]
    first = cli("a", "--trainer.max_steps", "2", *data, *batch)
    checkpoint = first.trainer.checkpoint_callback.last_model_path
    source = SyntheticData(seq_len=16, num_samples=64)
    assert read_hyperparameters(checkpoint)["data"]["train"] == source.to_config()  # plain, every option
    assert torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint) == []  # weights_only loads it
    # the same checkpoint as a run before this change wrote it: old `source:` dicts in hparams and data state
    state = torch.load(checkpoint, weights_only=True)
    old = {"source": "synthetic", "seq_len": 16, "num_samples": 64}
    state["datamodule_hyper_parameters"]["train"] = old
    state["RePoDataModule"]["train"] = old
    torch.save(state, tmp_path / "old.ckpt")
    for root, given in (("b", []), ("c", data)):  # resumed as saved, or with the same source given explicitly
        resumed = cli(root, "--ckpt_path", str(tmp_path / "old.ckpt"), "--trainer.max_steps", "4", *given)
        assert resumed.datamodule.train_source == source and resumed.trainer.global_step == 4
    assert "warning" not in capsys.readouterr().err


def test_a_resume_logs_into_the_version_directory_of_its_checkpoint(tmp_path):
    from pytorch_lightning.loggers import CSVLogger

    from repo_train.training.cli import continue_logger_version

    checkpoint = tmp_path / "lightning_logs" / "version_3" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"")
    for name in ("version_0", "version_4"):
        (tmp_path / "lightning_logs" / name).mkdir()
    logger = CSVLogger(tmp_path)
    continue_logger_version([logger], str(checkpoint))
    assert logger.version == 3 and logger.log_dir == str(tmp_path / "lightning_logs" / "version_3")
    chosen, elsewhere, fresh = CSVLogger(tmp_path, version=7), CSVLogger(tmp_path / "other"), CSVLogger(tmp_path)
    continue_logger_version([chosen, elsewhere], str(checkpoint))
    continue_logger_version([fresh], None)
    assert (chosen.version, elsewhere.version, fresh.version) == (7, 0, 5)  # a chosen version, another root, no resume


def test_the_fresh_repo_note_is_hidden_only_while_a_resumed_subcommand_runs(caplog):
    import logging

    from repo_train.training.cli import _not_fresh_on_resume

    logger = logging.getLogger("repo_train.modeling.olmo2")
    note = "base has no REPO weights: the 3 REPO layers start from fresh ones"
    with caplog.at_level(logging.WARNING, logger=logger.name):
        with _not_fresh_on_resume():
            logger.warning(note)
            logger.warning("another warning")
        logger.warning(note)  # a later run in the same process still says it
    assert [r.getMessage() for r in caplog.records] == ["another warning", note]


#: A 2-step run of `fit --model.position_method repo --model.repo_start_layer 1 --model.position_options
#: '{curriculum_start: 1.0, curriculum_steps: 4}'` (2-layer, d = 32, vocab 64), saved by the code of 236546c,
#: before `model.position` replaced those options.
OLD_POSITION_CHECKPOINT = (
    Path(__file__).parents[1] / "fixtures" / "training_checkpoint_before_position_config" / "step2.ckpt"
)


def test_a_checkpoint_from_before_model_position_resumes_as_the_same_position():
    from repo_train.checkpoints import read_hyperparameters

    saved = read_hyperparameters(OLD_POSITION_CHECKPOINT)
    assert saved["model"]["position_method"] == "repo"  # the fixture is what it says
    take, warning = compare_resume_hparams("x.ckpt", saved, {"model": {}, "data": {}}, allow_changes=False)
    expected = RepoPosition(start_layer=1, curriculum_start=1.0, curriculum_steps=4)
    assert take["model"]["position"] == expected.to_config() and warning is None
    assert not {"position_method", "repo_start_layer", "repo_hidden_size", "position_options"} & set(take["model"])
    same = {
        "class_path": "RepoPosition",
        "init_args": {"start_layer": 1, "curriculum_start": 1.0, "curriculum_steps": 4},
    }
    take, warning = compare_resume_hparams("x.ckpt", saved, {"model": {"position": same}}, allow_changes=False)
    assert "position" not in take["model"] and warning is None
    with pytest.raises(ValueError, match=r"depend on: model\.position = .*'start_layer': 1.*'start_layer': 2"):
        other = {"class_path": "RepoPosition", "init_args": {"start_layer": 2}}
        compare_resume_hparams("x.ckpt", saved, {"model": {"position": other}}, allow_changes=True)


@pytest.mark.slow  # one short Lightning run (~10 s quiet)
def test_fit_continues_a_checkpoint_from_before_model_position(tmp_path, monkeypatch, one_thread):
    import shutil

    import torch

    from repo_train.cli import main

    run = tmp_path / "run"
    run.mkdir()
    checkpoint = shutil.copy(OLD_POSITION_CHECKPOINT, run / "step2.ckpt")
    monkeypatch.setattr(sys, "argv", ["python -m repo_train"])
    code = main([
        "fit", "--ckpt_path", str(checkpoint), "--trainer.max_steps", "3", "--trainer.default_root_dir", str(run),
        "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu", "--checkpoint.every_n_train_steps", "1",
    ])  # fmt: skip
    assert code == 0
    resumed = torch.load(next(run.rglob("*step=3.ckpt")), weights_only=True, map_location="cpu")
    assert resumed["global_step"] == 3
    assert resumed["hyper_parameters"]["position"]["init_args"]["curriculum_steps"] == 4
    config = resumed["model_config"]
    assert (config["position_method"], config["repo_start_layer"]) == ("repo", 1)
    assert config["position_options"] == {"curriculum_start": 1.0, "curriculum_steps": 4}
