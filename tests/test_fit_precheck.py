"""`fit` / `validate` refusals that need no model come from the kept parser in a second, in the live words.

The fast tests check what the precheck refuses and what it leaves to the live
command (valid settings, what it cannot judge, a snapshot of other sources),
and that a refusal loads no heavy package. The slow test runs every case of
`REFUSED` through both paths, the precheck and the live LightningCLI, and
requires the same line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_helpers import ALIAS_BOMB
from test_startup import probe

from repo_train import fit_precheck, help_snapshot

ROOT = Path(__file__).resolve().parents[1]


def _current() -> bool:
    try:
        entry = json.loads(help_snapshot.SNAPSHOT.read_text())[help_snapshot.PARSER]
    except (OSError, ValueError, KeyError):
        return False
    return entry["key"] == help_snapshot.inputs_key(terminal=False)


needs_current_snapshot = pytest.mark.skipif(
    not _current(), reason="help_snapshot.json is not of this checkout: python scripts/regenerate_help_snapshot.py"
)


def _files(tmp: Path) -> None:
    """The inputs the cases name: config files, a root dir that is a file, one with an earlier checkpoint."""
    (tmp / "list.yaml").write_text("- model\n- data\n")
    (tmp / "broken.yaml").write_text("model: {lr: [\n")
    (tmp / "typo.yaml").write_text("model:\n  learning_rate: 0.1\n")
    (tmp / "wrong-type.yaml").write_text("trainer:\n  max_steps: many\n")
    (tmp / "bomb.yaml").write_text(ALIAS_BOMB)
    (tmp / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (tmp / "root-file").write_text("a file\n")
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
]
#: `validate` cases: (name, arguments after `validate`, a phrase).
REFUSED_VALIDATE = [
    ("validate-nothing", [], "validate needs --data.val SOURCE"),
    ("validate-ckpt-missing", ["--ckpt_path", "{tmp}/no.ckpt"], "does not exist"),
    ("validate-unknown-option", ["--trainer.max_stepz", "1"], "unrecognized arguments"),
]


def _argv(subcommand: str, args: list[str], tmp: Path) -> list[str]:
    base = ["--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp / "run")] if subcommand == "fit" else []
    return [subcommand, *base, *(arg.replace("{tmp}", str(tmp)) for arg in args)]


CASES = [("fit", *case) for case in REFUSED] + [("validate", *case) for case in REFUSED_VALIDATE]


@needs_current_snapshot
@pytest.mark.parametrize(("subcommand", "name", "args", "phrase"), CASES, ids=[c[1] for c in CASES])
def test_the_precheck_refuses_in_one_line(subcommand, name, args, phrase, tmp_path, monkeypatch):
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    _files(tmp_path)
    line = fit_precheck.refusal(_argv(subcommand, args, tmp_path))
    assert line is not None and phrase in line and "\n" not in line, line
    assert not (tmp_path / "run").exists()


@needs_current_snapshot
@pytest.mark.parametrize(
    "args",
    [
        [],  # the tiny default
        ["--model.position", "RepoPosition", "--model.position.start_layer", "2"],  # a class's own option: live
        ["--data.train", "SyntheticData", "--data.train.seq_len", "abc"],  # ... even a bad one: live says it
        ["--import", "my_module"],
        ["--model.position_method", "r2n1"],  # an old name: live names the new spelling
        ["--help", "--trainer.max_steps", "abc"],
        ["--trainer.callbacks+=EarlyStopping"],
        ["--ckpt_path", "last"],  # Lightning's alias, not a path
    ],
)
def test_what_it_cannot_judge_goes_to_the_live_command(args, tmp_path, monkeypatch):
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    assert fit_precheck.refusal(_argv("fit", args, tmp_path)) is None


@needs_current_snapshot
@pytest.mark.parametrize("config", sorted((ROOT / "configs" / "train").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_passes(config, tmp_path, monkeypatch):
    """No false refusal: the paper configs (multi-GPU, DeepSpeed, their data sources) are not refused here."""
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    argv = ["fit", "--config", str(config), "--trainer.default_root_dir", str(tmp_path / "run")]
    assert fit_precheck.refusal(argv) is None


@needs_current_snapshot
def test_a_class_path_in_a_value_is_never_imported(tmp_path, monkeypatch):
    """Values the precheck does not judge are kept as given: a class_path in them imports nothing (jsonargparse
    would import it for an option typed `Any`)."""
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    (tmp_path / "marker_pkg").mkdir()
    (tmp_path / "marker_pkg" / "__init__.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Thing:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "run.yaml").write_text(
        "trainer:\n  callbacks: [{class_path: marker_pkg.Thing}]\n  logger: {class_path: marker_pkg.Thing}\n"
    )
    line = fit_precheck.refusal(_argv("fit", ["--config", f"{tmp_path}/run.yaml", "--model.lr", "x"], tmp_path))
    assert line is not None and "--model.lr: 'x' is not valid" in line
    assert not (tmp_path / "imported").exists()
    (tmp_path / "model.yaml").write_text("model:\n  config_overrides: {class_path: marker_pkg.Thing}\n")
    line = fit_precheck.refusal(_argv("fit", ["--config", f"{tmp_path}/model.yaml"], tmp_path))
    assert "pass --import marker_pkg" in line  # under model / data: refused by name, as the live command does
    assert not (tmp_path / "imported").exists()


def test_a_snapshot_of_other_sources_or_the_live_switch_judges_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    snapshot = tmp_path / "snapshot.json"
    monkeypatch.setattr(help_snapshot, "SNAPSHOT", snapshot)
    kept = {"options": {"model.lr": {"type": ["float"], "default": 0.1}}, "classes": [], "sections": ["model"]}
    entry = {"key": help_snapshot.inputs_key(terminal=False), "versions": {}, "subcommands": {"fit": kept}}
    snapshot.write_text(json.dumps({help_snapshot.PARSER: entry}))
    assert "--model.lr: 'x' is not valid" in fit_precheck.refusal(["fit", "--model.lr", "x"])
    assert fit_precheck.refusal(["validate", "--model.lr", "x"]) is None  # not kept
    monkeypatch.setenv(help_snapshot.LIVE, "1")
    assert fit_precheck.refusal(["fit", "--model.lr", "x"]) is None
    monkeypatch.delenv(help_snapshot.LIVE)
    snapshot.write_text(json.dumps({help_snapshot.PARSER: {**entry, "key": "another checkout"}}))
    assert fit_precheck.refusal(["fit", "--model.lr", "x"]) is None


@needs_current_snapshot
def test_a_refusal_loads_no_heavy_package(tmp_path):
    _files(tmp_path)
    for args in (["--model.no_such_key", "1"], ["--config", f"{tmp_path}/typo.yaml"], ["--ckpt_path", "no.ckpt"]):
        code, err, heavy = probe("python -m repo_train fit", args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert heavy == [], f"fit {' '.join(args)} imported {heavy} before refusing"


@pytest.mark.slow  # the live side imports Lightning once, then parses each case (~1-3 s each)
def test_the_live_command_refuses_each_case_in_the_same_line(tmp_path, monkeypatch):
    """Each case the precheck refuses is refused by LightningCLI's own path too, in exactly the same words."""
    from repo_train.training.cli import run  # Lightning: only this test needs it

    if not _current():
        pytest.skip("help_snapshot.json is not of this checkout: the precheck judges nothing here")
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    _files(tmp_path)
    for subcommand, name, args, _phrase in CASES:
        argv = _argv(subcommand, args, tmp_path)
        fast = fit_precheck.refusal(argv)
        with pytest.raises((ValueError, FileNotFoundError)) as live:
            run(list(argv))
        assert str(live.value) == fast, f"{name}: live {live.value!s} / precheck {fast}"
        assert not (tmp_path / "run").exists(), name
