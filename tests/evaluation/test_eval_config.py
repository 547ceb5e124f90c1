"""`python -m evaluation run` configured the jsonargparse way: typed tasks/methods, short forms, replay."""

from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import pytest
import yaml

from evaluation.cli import main
from evaluation.config import add_run_options, resolve
from evaluation.run_config import RunConfig, option_fields
from evaluation.sample_data import KV_RETRIEVAL_75_KEYS, LOST_IN_THE_MIDDLE_DIR, NQ_OPEN_ORACLE
from evaluation.tasks import TASKS, Task, register_task
from repo_common.config_cli import ConfigParser


def _resolve(argv):
    parser = ConfigParser.for_command("python -m evaluation run", "")
    add_run_options(parser)
    options, _ = parser.parse(argv)
    return resolve(options)


def _write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_the_short_form_and_the_class_form_are_the_same_run(tmp_path):
    short = _resolve(
        [
            "--out",
            "o",
            "--tasks",
            "kv",
            "--num_keys",
            "4",
            "--num_examples",
            "2",
            "--methods",
            "pi:scale=2+caliope:calibrator=hourglass",
        ]
    )
    typed = _resolve(
        [
            "--config",
            _write(
                tmp_path,
                "run.yaml",
                {
                    "out": "o",
                    "tasks": [
                        {
                            "class_path": "evaluation.tasks.KVRetrievalTask",
                            "init_args": {"num_keys": 4, "num_examples": 2},
                        }
                    ],
                    "methods": [
                        [
                            {"class_path": "evaluation.methods.PositionInterpolation", "init_args": {"scale": 2}},
                            {
                                "class_path": "evaluation.methods.caliope.Caliope",
                                "init_args": {"calibrator": "hourglass"},
                            },
                        ]
                    ],
                },
            ),
        ]
    )
    assert short.run.tasks == typed.run.tasks and short.run.methods == typed.run.methods  # the same objects
    assert [type(m).__name__ for m in short.run.methods[0].methods] == ["PositionInterpolation", "Caliope"]
    assert short.run.labels[0].startswith("pi:scale=2+caliope:")  # the canonical spec, every parameter spelled out
    assert short.config == typed.config


def test_print_config_is_the_resolved_run_and_replays_to_the_same_run(tmp_path, capsys):
    argv = [
        "run",
        "--out",
        str(tmp_path / "o"),
        "--tasks",
        "mdqa,kv",
        "--methods",
        "baseline",
        "--methods",
        "pi:scale=2",
    ]
    assert main([*argv, "--print_config"]) == 0
    printed = capsys.readouterr().out
    resolved = yaml.safe_load(printed)
    assert [t["class_path"] for t in resolved["tasks"]] == [
        "evaluation.tasks.mdqa.MDQATask",
        "evaluation.tasks.kv_retrieval.KVRetrievalTask",
    ]
    assert resolved["tasks"][0]["init_args"]["path"] == str(NQ_OPEN_ORACLE)  # the packaged sample, resolved
    assert resolved["methods"][1] == {
        "class_path": "evaluation.methods.pi.PositionInterpolation",
        "init_args": {"scale": 2.0},
    }
    assert not (tmp_path / "o").exists()  # --print_config runs nothing
    replay = tmp_path / "replay.yaml"
    replay.write_text(printed)
    assert main(["run", "--config", str(replay), "--print_config"]) == 0
    assert capsys.readouterr().out == printed


def test_a_run_stores_its_config_and_replaying_it_writes_the_same_results(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    argv = ["--tasks", "kv", "--num_keys", "3", "--num_examples", "2", "--methods", "pi:scale=2", "--no_report"]
    assert main(["run", "--out", str(first), *argv, "--no_progress"]) == 0
    stored = first / "config.yaml"
    assert yaml.safe_load(stored.read_text())["out"] == str(first)
    # the stored file with only --out changed: the same records, manifest and summary
    assert main(["run", "--config", str(stored), "--out", str(second)]) == 0
    capsys.readouterr()
    for name in ("records.jsonl", "run.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert json.loads((first / "summary.json").read_text()) == json.loads((second / "summary.json").read_text())


def test_class_tasks_find_their_data_file_in_data_dir(tmp_path):
    resolved = _resolve(
        [
            "--out",
            "o",
            "--data_dir",
            str(LOST_IN_THE_MIDDLE_DIR),
            "--tasks",
            json.dumps([{"class_path": "evaluation.tasks.KVRetrievalTask", "init_args": {"num_keys": 75}}]),
        ]
    )
    (task,) = resolved.run.tasks
    assert task.name == "kv" and task.path == str(KV_RETRIEVAL_75_KEYS) and task.num_keys == 75


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch_size", "0"], "option --batch_size: expected a positive integer, got 0"),
        (["--truncate", "right"], "option --truncate: expected one of ['middle', 'left'], got 'right'"),
        (["--dtype", "fp8"], "option --dtype: expected one of ['auto', 'float32', 'bfloat16', 'float16'], got 'fp8'"),
        (["--tasks", '[{"class_path": "evaluation.tasks.KVRetrievalTask", "init_args": {"num_kys": 3}}]'], "num_kys"),
        (["--tasks", "kv,nosuch"], "unknown task(s) ['nosuch']"),
        (["--methods", '[{"class_path": "collections.OrderedDict"}]'], "not one of the project's packages"),
        (["--methods", '[{"class_path": "evaluation.tasks.KVRetrievalTask"}]'], "bad method spec"),
        (["--import", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        (["--config", "{tmp}/list.yaml"], "the top level must be a mapping of keys to values, got list"),
        (["--config", "{tmp}/missing.yaml"], "no config file at"),
    ],
)
def test_mistakes_are_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["run", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_options_override_config_files_in_any_order_and_an_empty_file_sets_nothing(tmp_path):
    config = _write(tmp_path, "run.yaml", {"out": "from-file", "batch_size": 3, "seed": 5})
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    before = _resolve(["--batch_size", "7", "--config", config, "--config", str(empty)])
    after = _resolve(["--config", config, "--batch_size", "7"])
    assert before.config == after.config
    assert (before.config["batch_size"], before.config["seed"], before.config["out"]) == (7, 5, "from-file")


def test_every_option_is_a_run_config_field_with_its_docstring_as_help():
    parser = ConfigParser.for_command("python -m evaluation run", "")
    add_run_options(parser)
    helps = {action.dest: action.help for action in parser._actions}
    fields = option_fields(RunConfig)
    assert [item.name for item in fields] == [dest for dest in helps if dest in {item.name for item in fields}]
    assert helps["batch_size"] == "prompts per forward" and helps["no_report"] == "skip plots and report.md"
    assert all(helps[item.name] for item in fields) and "bootstrap_resamples" not in helps  # Python callers' only


def test_a_true_false_option_alone_means_true():
    alone = _resolve(["--out", "o", "--no_report", "--allow_search_overlap", "--chat_template", "--max_records", "3"])
    given = ["--no_report", "true", "--allow_search_overlap", "true", "--chat_template", "true", "--max_records", "3"]
    assert alone.config == _resolve(["--out", "o", *given]).config
    assert (alone.run.no_report, alone.run.allow_search_overlap, alone.run.chat_template) == (True, True, True)
    assert alone.run.max_records == 3 and not _resolve(["--out", "o", "--no_report", "false"]).run.no_report


@dataclasses.dataclass(kw_only=True)
class _NoOwnDefaults(Task):
    """A task that declares no default for the short-form options it takes (None: asks for a value)."""

    name: ClassVar[str] = "no_own_defaults"
    num_keys: int | None = None
    gold_positions: str | list[int] | None = None

    def rows(self):
        yield from ()


def test_a_task_s_own_default_wins_unless_the_option_is_given(tmp_path, capsys, registries_restored):
    """colour_lookup (a user's task, by --import) declares gold_positions: all, kv its own grid; the option given
    sets both; the command's default is only for a task that declares none."""
    argv = ["run", "--out", str(tmp_path / "o"), "--import", "examples.extension.colour_task", "--tasks",
            "colour_lookup,kv", "--num_examples", "2", "--print_config"]  # fmt: skip
    assert main(argv) == 0
    tasks = {
        t["class_path"].rpartition(".")[2]: t["init_args"] for t in yaml.safe_load(capsys.readouterr().out)["tasks"]
    }
    assert tasks["ColourLookupTask"]["gold_positions"] == "all"
    assert tasks["KVRetrievalTask"]["gold_positions"] == "ends-20-50-80"
    assert main([*argv, "--gold_positions", "0,3"]) == 0
    tasks = [t["init_args"] for t in yaml.safe_load(capsys.readouterr().out)["tasks"]]
    assert [t["gold_positions"] for t in tasks] == [[0, 3], [0, 3]]
    register_task(_NoOwnDefaults)
    try:
        (task,) = RunConfig(out=str(tmp_path / "o"), tasks="no_own_defaults", model="m").tasks
        assert (task.gold_positions, task.num_keys) == ("ends-20-50-80", 75)  # the command's
        (task,) = RunConfig(out=str(tmp_path / "o"), tasks="no_own_defaults").tasks
        assert (task.gold_positions, task.num_keys) == ("ends-20-50-80", 4)  # the tiny model's size
        (task,) = RunConfig(out=str(tmp_path / "o"), tasks="no_own_defaults", gold_positions="all", num_keys=9).tasks
        assert (task.gold_positions, task.num_keys) == ("all", 9)
    finally:
        del TASKS[_NoOwnDefaults.name]
