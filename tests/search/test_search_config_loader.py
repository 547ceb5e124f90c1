"""One loader for every way a search is configured, and the outputs of earlier searches still read by it.

tests/fixtures/search_outputs_session10/ holds NAME.config.yaml and NAME.state.json exactly as the search of
commit d696c8f wrote them (configs/search/tiny.yaml, one generation; `raced` with ga.racing), before the
search's second YAML loader was removed.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from search.cli import main
from search.config import ConfigError, SearchConfig, load_config, parse_search_args
from search.ga import SearchState
from search.outputs import check_search_outputs
from search.racing import RacingConfig

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "tests" / "fixtures" / "search_outputs_session10"
TINY = ROOT / "configs" / "search" / "tiny.yaml"


def _tiny_one_generation(**ga) -> SearchConfig:
    tiny = SearchConfig.tiny()
    return dataclasses.replace(
        tiny,
        ga=dataclasses.replace(tiny.ga, generations=1, **ga),
        held_out=dataclasses.replace(tiny.held_out, num_examples=0),
    )


#: Keys added to the search config since 2026-11-26, after which key of the file each is printed, and its default.
LATER_KEYS = [("task", "system_prompt", "score", "metric")]


def _with_later_keys(text: str) -> str:
    """A 2026-11-26 NAME.config.yaml as --print_config writes it today: every later key at its default."""
    lines = text.splitlines(keepends=True)
    for section, after, key, default in LATER_KEYS:
        start = lines.index(f"{section}:\n")
        at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(f"  {after}:"))
        lines.insert(at + 1, f"  {key}: {default}\n")
    return "".join(lines)


def load_config_text(text: str, folder: Path) -> SearchConfig:
    path = folder / "printed.config.yaml"
    path.write_text(text)
    return load_config(path)


def test_earlier_config_and_state_files_load_and_replay_byte_for_byte(tmp_path, monkeypatch, capsys):
    expected = {
        "plain": _tiny_one_generation(patience=3),
        "raced": _tiny_one_generation(racing=RacingConfig((0.5, 1.0), min_questions=2)),
    }
    for name, config in expected.items():
        saved = OLD / name / "s.config.yaml"
        assert load_config(saved) == config  # the Python API reads a run's NAME.config.yaml (out, resume, ...)
        assert SearchState.load(OLD / name / "s.state.json").config == config.ga  # the state's GA settings
        assert main(["run", "--config", str(saved), "--print_config"]) == 0
        printed = capsys.readouterr().out  # the CLI replays it and writes it back unchanged, but for later keys
        assert printed == _with_later_keys(saved.read_text())
        assert load_config_text(printed, tmp_path) == config
    shutil.copytree(OLD / "plain", tmp_path / "plain")
    monkeypatch.chdir(tmp_path)  # its out is relative: plain/s.json
    assert check_search_outputs("plain/s.json", resume=True)["state"].is_file()  # still this search's own files


def test_the_command_line_files_and_the_python_api_give_the_same_config_and_the_same_refusal(tmp_path):
    cli = parse_search_args(["--config", str(TINY), "--ga.seed", "3", "--task.num_items", "5"])
    data = SearchConfig.tiny().to_dict()
    data["ga"]["seed"], data["task"]["num_items"] = 3, 5
    tiny = SearchConfig.tiny()
    expected = dataclasses.replace(
        tiny, ga=dataclasses.replace(tiny.ga, seed=3), task=dataclasses.replace(tiny.task, num_items=5)
    )
    assert cli == SearchConfig.from_dict(data) == expected
    bad = tmp_path / "bad.yaml"
    bad.write_text("ga: {population: 7, popultion: 3}\n")
    messages = []
    for load in (
        lambda: load_config(bad),
        lambda: parse_search_args(["--config", str(bad)]),
        lambda: SearchConfig.from_dict({"ga": {"population": 7, "popultion": 3}}),
    ):
        with pytest.raises(ConfigError) as caught:
            load()
        messages.append(str(caught.value))
    assert all("unknown key 'ga.popultion' in ga; valid keys are" in m and "\n" not in m for m in messages), messages
    state = json.loads((OLD / "plain" / "s.state.json").read_text())
    state["config"]["popultion"] = 3
    (tmp_path / "s.state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"its GA settings: unknown key 'ga.popultion' in ga; valid keys are \["):
        SearchState.load(tmp_path / "s.state.json")
