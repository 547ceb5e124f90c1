"""`fit` / `validate` refuse what needs no model before the model is built or any data is read.

Every case runs the live command (`python -m repo_train`'s `main(argv)`, LightningCLI's parser) in this
process, with the module's and the data module's constructors replaced by ones that fail the test: each
refusal is one line, exit code 2, and leaves no run directory. The shipped paper configs pass the same
parse and checks (`check_arguments`, which workflows/loop_config.py judges a loop's train configs with).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from bad_input_helpers import ALIAS_BOMB

from repo_common.cli_errors import EXIT_USAGE
from repo_train.cli import main
from repo_train.modeling.presets import preset
from repo_train.training import cli as training_cli
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule

ROOT = Path(__file__).resolve().parents[1]
#: A shipped model of another shape than the tiny presets (hidden 128): what init_from replaces them with.
DIP = str(ROOT / "workflows" / "assets" / "tiny-kv-dip")


def _files(tmp: Path) -> None:
    """The inputs the cases name: config files, a root dir that is a file, one with an earlier checkpoint."""
    (tmp / "list.yaml").write_text("- model\n- data\n")
    (tmp / "broken.yaml").write_text("model: {lr: [\n")
    (tmp / "typo.yaml").write_text("model:\n  learning_rate: 0.1\n")
    (tmp / "wrong-type.yaml").write_text("trainer:\n  max_steps: many\n")
    (tmp / "bomb.yaml").write_text(ALIAS_BOMB)
    (tmp / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (tmp / "root-file").write_text("a file\n")
    for section in ("trainer", "model", "data"):
        (tmp / f"{section}-null.yaml").write_text(f"{section}: null\n")
    (tmp / "preset.yaml").write_text("model:\n  preset_name: tiny\n")
    (tmp / "earlier" / "lightning_logs" / "version_0" / "checkpoints").mkdir(parents=True)
    (tmp / "earlier" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"x")


#: (name, arguments after `fit --trainer.max_steps 1 --trainer.default_root_dir {tmp}/run`, a phrase of the line)
REFUSED = [
    ("unknown-option", ["--model.no_such_key", "1"], "unrecognized arguments: --model.no_such_key"),
    ("int-not-int", ["--trainer.max_steps", "abc"], "--trainer.max_steps: 'abc' is not valid (expected int)"),
    ("optional-int", ["--trainer.max_epochs", "x"], "--trainer.max_epochs: 'x' is not valid"),
    ("float-not-float", ["--model.lr", "fast"], "--model.lr: 'fast' is not valid (expected float)"),
    ("bool-not-bool", ["--model.activation_checkpointing", "maybe"], "--model.activation_checkpointing"),
    ("seed-not-int", ["--seed_everything", "x"], "--seed_everything"),
    ("int-given-a-float", ["--trainer.max_steps", "1.5"], "'1.5' is not valid"),
    ("a-positional-word", ["positional"], "unrecognized arguments: positional"),
    ("config-without-file", ["--config"], "argument --config: expected one argument"),
    ("short-config-without-file", ["-c"], "argument -c: expected one argument"),
    ("short-config-alias-bomb", ["-c", "{tmp}/bomb.yaml"], "expands to more than 100,000 values"),
    ("config-missing", ["--config", "{tmp}/nowhere.yaml"], "File does not exist"),
    ("config-not-a-mapping", ["--config", "{tmp}/list.yaml"], "the config is not a YAML mapping"),
    ("config-broken", ["--config", "{tmp}/broken.yaml"], "the config is not valid YAML"),
    ("config-unknown-key", ["--config", "{tmp}/typo.yaml"], "model.learning_rate"),
    ("config-wrong-type", ["--config", "{tmp}/wrong-type.yaml"], "'many' is not valid"),
    ("config-alias-bomb", ["--config", "{tmp}/bomb.yaml"], "expands to more than 100,000 values"),
    ("config-binary", ["--config", "{tmp}/binary.yaml"], "is binary, not UTF-8 text"),
    ("ckpt-missing", ["--ckpt_path", "{tmp}/no.ckpt"], "does not exist"),
    ("data-source-elsewhere", ["--data.train", "elsewhere.sources.Mine"], "pass --import elsewhere.sources"),
    ("root-is-a-file", ["--trainer.default_root_dir", "{tmp}/root-file"], "is a file, not a directory"),
    ("root-holds-a-run", ["--trainer.default_root_dir", "{tmp}/earlier"], "holds an earlier run's checkpoint"),
    ("checkpoint-every-0", ["--checkpoint.every_n_train_steps", "0"], "every_n_train_steps must be >= 1"),
    ("batch-not-divisible", ["--data.global_batch_size", "10", "--data.micro_batch_size", "4"], "not divisible"),
    ("batch-zero", ["--data.micro_batch_size", "0"], "batch sizes must be >= 1"),
    ("old-option-name", ["--model.position_method", "r2n1"], "model.position"),
    ("config-trainer-null", ["--config", "{tmp}/trainer-null.yaml"], "trainer: null in the config"),
    ("config-model-null", ["--config", "{tmp}/model-null.yaml"], "model: null in the config"),
    ("config-data-null", ["--config", "{tmp}/data-null.yaml"], "data: null in the config"),
    (
        "preset-that-init-from-replaces",
        ["--model.preset_name", "tiny", "--model.init_from", DIP],
        (
            "(vocab_size 258, hidden_size 128, intermediate_size 512) is not the model.preset_name='tiny' that is "
            "also set (vocab_size 256, hidden_size 64, intermediate_size 128): init_from decides the model, so the "
            "preset would be ignored; drop model.preset_name"
        ),
    ),
    ("config-preset-that-init-from-replaces", ["--config", "{tmp}/preset.yaml", "--model.init_from", DIP], DIP),
]
#: `validate` cases: (name, arguments after `validate`, a phrase).
REFUSED_VALIDATE = [
    ("validate-nothing", [], "validate needs --data.val SOURCE"),
    ("validate-ckpt-missing", ["--ckpt_path", "{tmp}/no.ckpt"], "does not exist"),
    ("validate-unknown-option", ["--trainer.max_stepz", "1"], "unrecognized arguments"),
]
CASES = [("fit", *case) for case in REFUSED] + [("validate", *case) for case in REFUSED_VALIDATE]


def _argv(subcommand: str, args: list[str], tmp: Path) -> list[str]:
    base = ["--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp / "run")] if subcommand == "fit" else []
    return [subcommand, *base, *(arg.replace("{tmp}", str(tmp)) for arg in args)]


@pytest.fixture
def nothing_built(monkeypatch):
    """The module and the data module fail the test if they are built (their signatures kept: the parser's
    options come from them)."""
    for cls in (RePoLightningModule, RePoDataModule):

        @functools.wraps(cls.__init__)
        def built(self, *args, **kwargs):
            raise AssertionError(f"{type(self).__name__} was built before the refusal")

        monkeypatch.setattr(cls, "__init__", built)


@pytest.mark.parametrize(("subcommand", "name", "args", "phrase"), CASES, ids=[c[1] for c in CASES])
def test_refused_in_one_line_before_anything_is_built(subcommand, name, args, phrase, tmp_path, capsys, nothing_built):
    _files(tmp_path)
    code = main(_argv(subcommand, args, tmp_path))
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and phrase in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"python -m repo_train {subcommand}: error: "), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("config", sorted((ROOT / "configs" / "train").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_passes_the_checks(config, tmp_path, nothing_built):
    """No false refusal: the paper configs (multi-GPU, DeepSpeed, their data sources) parse and pass."""
    training_cli.check_arguments(["fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()


def test_init_from_with_the_default_preset_or_its_own_shape_is_not_refused(tmp_path, nothing_built):
    """init_from decides the model: the default preset is not a choice the user made, and a preset of init_from's
    own shape (the 1B configs name theirs, for the checks that need no weights) says the same thing."""
    root = ["--trainer.default_root_dir", str(tmp_path / "r")]
    training_cli.check_arguments(["fit", "--model.init_from", DIP, *root])
    same = tmp_path / "same-shape"
    same.mkdir()
    (same / "config.json").write_text(json.dumps(preset("tiny-byte", position_method="rope").to_dict()))
    training_cli.check_arguments(["fit", "--model.preset_name", "tiny-byte", "--model.init_from", str(same), *root])
    # a field config_overrides sets is the same in both, so it is not a difference
    wide = ["--model.config_overrides", "{hidden_size: 128, intermediate_size: 512}", "--model.init_from", DIP]
    training_cli.check_arguments(["fit", "--model.preset_name", "tiny-byte", *wide, *root])


def test_check_arguments_leaves_the_root_dir_to_a_caller_that_sets_it(tmp_path, nothing_built):
    _files(tmp_path)
    argv = ["fit", "--trainer.default_root_dir", str(tmp_path / "earlier")]
    with pytest.raises(ValueError, match="holds an earlier run's checkpoint"):
        training_cli.check_arguments(argv)
    training_cli.check_arguments(argv, root_dir=False)  # the loop's own run directory: not judged
    with pytest.raises(ValueError, match="every_n_train_steps must be >= 1"):
        training_cli.check_arguments([*argv, "--checkpoint.every_n_train_steps", "0"], root_dir=False)


def test_the_tripwire_fires_when_the_settings_pass(tmp_path, nothing_built):
    """The cases above are refused before the model is built, not because building it is impossible here."""
    with pytest.raises(AssertionError, match="was built before the refusal"):
        main(["fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "run")])


def test_the_paths_judged_before_lightning_follow_the_parser_s_precedence(tmp_path):
    """The command line's last value wins over the config files (`null` clears it), the last file's over an
    earlier one; Lightning's aliases and anything the parser must judge itself pass through."""
    from repo_train.training.settings_checks import check_paths_before_lightning

    real = tmp_path / "run.ckpt"
    real.write_bytes(b"")
    (tmp_path / "gone.yaml").write_text(f"ckpt_path: {tmp_path / 'gone.ckpt'}\n")
    (tmp_path / "init.yaml").write_text("model:\n  init_args:\n    init_from: models/no-such-model\n")
    passes = [
        ["fit", "--config", str(tmp_path / "gone.yaml"), "--ckpt_path", str(real)],
        ["fit", "--config", str(tmp_path / "gone.yaml"), "--ckpt_path", "null"],
        ["fit", "--ckpt_path", "last"],
        ["fit", "--ckpt_path"],  # the parser's to refuse
        ["fit", "--config", str(tmp_path / "missing.yaml")],
        ["fit", "--config", str(tmp_path / "init.yaml"), "--model.init_from", str(tmp_path)],
    ]
    for argv in passes:
        check_paths_before_lightning(argv)
    with pytest.raises(FileNotFoundError, match="gone.ckpt' does not exist"):
        check_paths_before_lightning(["fit", "--ckpt_path", str(real), "--config", str(tmp_path / "gone.yaml"),
                                      "--ckpt_path", str(tmp_path / "gone.ckpt")])  # fmt: skip
    with pytest.raises(
        FileNotFoundError, match="init_from='models/no-such-model' is not an HF model directory: no such"
    ):
        check_paths_before_lightning(["fit", "--config", str(tmp_path / "init.yaml")])
