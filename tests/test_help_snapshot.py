"""`fit --help` / `fit --print_config` from repo_train/help_snapshot.json: served only when it is current, and
always what the live LightningCLI prints.

The fast tests check the gate (the key) on a snapshot of their own; the slow
one runs the live command and compares it with the committed file, so a
change to the training code that alters the help fails here until the file is
regenerated (`python scripts/regenerate_help_snapshot.py`).
"""

from __future__ import annotations

import json

import pytest

from repo_train import help_snapshot

REGENERATE = "python scripts/regenerate_help_snapshot.py"


def snapshot_of(path, terminal: bool, text: str) -> None:
    mode = "terminal" if terminal else "pipe"
    key = help_snapshot.inputs_key(terminal)
    outputs = {"fit --help": text, "fit --print_config": f"# config\n{text}"}
    path.write_text(json.dumps({mode: {"key": key, "outputs": outputs}}))


def test_a_current_snapshot_answers_exactly_its_questions(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(help_snapshot, "SNAPSHOT", tmp_path / "snapshot.json")
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    snapshot_of(help_snapshot.SNAPSHOT, terminal=False, text="the help\n")
    assert help_snapshot.answer(["fit", "--help"], terminal=False)
    assert help_snapshot.answer(["fit", "-h"], terminal=False)
    assert help_snapshot.answer(["fit", "--print_config"], terminal=False)
    assert capsys.readouterr().out == "the help\nthe help\n# config\nthe help\n"
    for argv in (["fit", "--help", "--trainer.max_steps", "3"], ["validate", "--help"], ["fit"], []):
        assert not help_snapshot.answer(argv, terminal=False), argv
    assert not help_snapshot.answer(["fit", "--help"], terminal=True)  # made for a pipe: the bar's default differs
    monkeypatch.setenv(help_snapshot.LIVE, "1")
    assert not help_snapshot.answer(["fit", "--help"], terminal=False)
    assert capsys.readouterr().out == ""


def test_a_snapshot_of_other_sources_or_packages_is_not_served(tmp_path, monkeypatch, capsys):
    """Another package version, or any source file changed under repo_train/ or repo_common/: live answer."""
    monkeypatch.setattr(help_snapshot, "SNAPSHOT", tmp_path / "snapshot.json")
    monkeypatch.delenv(help_snapshot.LIVE, raising=False)
    snapshot_of(help_snapshot.SNAPSHOT, terminal=False, text="the help\n")
    with monkeypatch.context() as patch:
        patch.setattr(help_snapshot, "_version", lambda package: "0.0.1")
        assert not help_snapshot.answer(["fit", "--help"], terminal=False)
    for folder in help_snapshot._SOURCES:
        (tmp_path / "tree" / folder).mkdir(parents=True)
        (tmp_path / "tree" / folder / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(help_snapshot, "_ROOT", tmp_path / "tree")
    snapshot_of(help_snapshot.SNAPSHOT, terminal=False, text="the help\n")
    assert help_snapshot.answer(["fit", "--help"], terminal=False)
    (tmp_path / "tree" / "repo_common" / "a.py").write_text("x = 2\n")
    assert not help_snapshot.answer(["fit", "--help"], terminal=False)
    help_snapshot.SNAPSHOT.write_text("{not json")
    assert not help_snapshot.answer(["fit", "--help"], terminal=False)
    assert capsys.readouterr().out == "the help\n"


@pytest.mark.slow  # five live LightningCLI starts: ~2 min on two loaded cores
def test_the_committed_snapshot_is_the_live_commands_output():
    """Fails when the project's sources changed since the file was written (regenerate it); skips when only the
    installed packages differ (setup.cfg pins no exact Lightning or jsonargparse: such a machine answers live)."""
    committed = json.loads(help_snapshot.SNAPSHOT.read_text())
    installed = help_snapshot.package_versions()
    if any(entry.get("versions") != installed for entry in committed.values()):
        pytest.skip(f"the snapshot was made with other packages than {installed}: those commands answer live here")
    live = help_snapshot.live_snapshot()
    for mode, entry in live.items():
        for name, text in entry.get("outputs", {}).items():
            assert committed[mode]["outputs"][name] == text, (
                f"{name} ({mode}) differs from the live output: {REGENERATE}"
            )
        assert committed[mode]["key"] == entry["key"], f"the snapshot is not of this checkout: run {REGENERATE}"
    assert committed[help_snapshot.PARSER]["subcommands"] == live[help_snapshot.PARSER]["subcommands"], (
        f"the fit / validate parsers' options differ from the live ones: {REGENERATE}"
    )
