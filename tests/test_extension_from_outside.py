"""Extension from outside the project's packages (`examples/extension/`), through the commands a user runs.

A task and a calibrator written in the user's own modules are named with `--import` and then work in the
short forms and as class_paths; the run's config.yaml replays them. A class_path to any other module is
refused before that module is imported (its top-level code never runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaluation import cli
from evaluation.model_loading import byte_tokenizer
from evaluation.tasks import TASKS, Task, register_task
from repo_common import user_code

ROOT = Path(__file__).resolve().parents[1]
TASK = "examples.extension.colour_task"
CALIBRATOR = "examples.extension.clamp_calibrator"


def _records(out: Path) -> list[tuple[str, str, int, str]]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return sorted((r["method"], r["id"], r["gold_position"], r["prediction"]) for r in rows)


@pytest.mark.slow
def test_a_users_task_and_calibrator_run_and_replay_through_evaluation_run(tmp_path):
    """Short forms after --import; then `--config OUT/config.yaml` (class_paths + its import list) replays it."""
    first, replay = tmp_path / "first", tmp_path / "replay"
    command = [sys.executable, "-m", "evaluation", "run", "--no_progress", "--no_report"]
    subprocess.run(
        [*command, "--import", f"{TASK},{CALIBRATOR}", "--tasks", "colour_lookup", "--num_examples", "2",
         "--task_param", "colour_lookup:num_items=4", "--gold_positions", "0,3",
         "--methods", "[baseline, 'clamp:limit=3']", "--out", str(first)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    config = yaml.safe_load((first / "config.yaml").read_text())
    assert config["import"] == [TASK, CALIBRATOR]
    assert config["tasks"][0]["class_path"] == f"{TASK}.ColourLookupTask"
    assert config["methods"][1] == {"class_path": f"{CALIBRATOR}.ClampPositions", "init_args": {"limit": 3.0}}
    records = _records(first)
    assert {r[0] for r in records} == {"baseline", "clamp:limit=3"} and {r[2] for r in records} == {0, 3}
    assert len(records) == 2 * 2 * 2  # methods x examples x gold positions
    subprocess.run(
        [*command, "--config", str(first / "config.yaml"), "--out", str(replay)],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert _records(replay) == records


def _module_with_a_side_effect(tmp_path: Path) -> tuple[str, Path]:
    """A module that leaves a file behind when it is imported, and defines a valid task."""
    marker = tmp_path / "imported.txt"
    package = tmp_path / "sideeffect_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('ran')\n"
        "from examples.extension.colour_task import ColourLookupTask as Copy\n"
    )
    return "sideeffect_pkg.tasks.Copy", marker


def test_a_class_path_outside_the_project_is_refused_before_its_module_runs(tmp_path, monkeypatch, capsys):
    class_path, marker = _module_with_a_side_effect(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"tasks": [{"class_path": class_path, "init_args": {"num_examples": 1}}]}))
    out = tmp_path / "out"
    assert cli.main(["run", "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pass --import sideeffect_pkg.tasks" in err, err
    assert not marker.exists() and not out.exists() and "sideeffect_pkg.tasks" not in sys.modules


def test_an_import_that_fails_is_one_line_naming_the_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_ext.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["run", "--import", "broken_ext", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--import broken_ext: importing it failed: RuntimeError: boom at import" in err
    assert cli.main(["run", "--import", str(tmp_path / "missing.py"), "--out", str(tmp_path / "out")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_class_paths_are_found_in_files_and_on_the_command_line():
    args = ["--tasks", "[{class_path: a.b.C}]", "--x.class_path", "d.E", "--y.class_path=f.G", "--n", "3"]
    assert list(user_code.class_paths_in_args(args)) == ["a.b.C", "d.E", "f.G"]
    nested = {"methods": [[{"class_path": "h.I", "init_args": {"inner": {"class_path": "j.K"}}}]]}
    assert list(user_code.class_paths_in(nested)) == ["h.I", "j.K"]
    assert user_code.allowed("evaluation.tasks.KVRetrievalTask")
    assert user_code.allowed("mine.sub.Task", ["mine"]) and not user_code.allowed("minefield.Task", ["mine"])
    user_code.check_class_path("KVRetrievalTask")  # a short name imports nothing: left to the parser


def test_register_task_refuses_a_second_class_under_a_taken_name(registries_restored):
    kv = TASKS["kv"]
    imposter = type("Imposter", (kv,), {"name": "kv"})
    with pytest.raises(
        ValueError, match="task 'kv' is already evaluation.tasks.kv_retrieval.KVRetrievalTask; give Imposter"
    ):
        register_task(imposter)
    with pytest.raises(TypeError, match="must be a dataclass subclass"):
        register_task(type("NotATask", (), {"name": "x"}))
    assert issubclass(kv, Task)


POLICY = "examples.extension.head_scale_policy"


def _tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env_path = f"{ROOT}"  # the user's module lives in the checkout; the run directory is elsewhere
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, check=False,
        env={**__import__("os").environ, "PYTHONPATH": env_path},
    )  # fmt: skip


@pytest.mark.slow
def test_a_users_trainable_policy_trains_exports_and_evaluates(tmp_path):
    """fit --import: its two options reach config.json, its schedule is logged, and the exported model loads in
    evaluation run (which imports the policy the same way) and replays from the run's saved config."""
    fit = _tool(
        "repo_train", "fit", "--import", POLICY, "--config", str(ROOT / "configs/train/tiny-repo.yaml"),
        "--model.position", "HeadScalePosition",
        "--model.position.start_scale", "0.5", "--model.position.warmup_steps", "2",
        "--model.config_overrides", "{vocab_size: 258}",  # the byte tokenizer's 256 bytes and 2 specials
        "--trainer.max_steps", "3", "--trainer.default_root_dir", "run", "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "false", "--data.train.seq_len", "32", "--data.train.num_samples", "64",
        cwd=tmp_path,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    saved = yaml.safe_load(next((tmp_path / "run").rglob("config.yaml")).read_text())
    assert saved["import"] == [POLICY] and saved["model"]["position"] == {
        "class_path": f"{POLICY}.HeadScalePosition", "init_args": {"start_scale": 0.5, "warmup_steps": 2}
    }  # fmt: skip
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((tmp_path / "run").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    assert [round(e.value, 3) for e in events.Scalars("train/head_scale_blend")] == [0.0, 0.5, 1.0]
    checkpoint = next((tmp_path / "run").rglob("last.ckpt"))
    export = _tool("repo_train", "export", "--import", POLICY, "--checkpoint", str(checkpoint), "--out", "hf",
                   "--no_tokenizer", cwd=tmp_path)  # fmt: skip
    assert export.returncode == 0, export.stderr[-2000:]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["position_method"] == "head_scale"
    assert config["position_options"] == {"start_scale": 0.5, "warmup_steps": 2}
    byte_tokenizer().save_pretrained(tmp_path / "hf")  # fits the vocabulary the model was trained with
    # without the module, the model's method is unknown: one line naming the fix
    unknown = _tool("evaluation", "run", "--model", "hf", "--out", "ev0", cwd=tmp_path)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "unknown position_method 'head_scale'" in unknown.stderr and "--import MODULE" in unknown.stderr
    evaluated = _tool("evaluation", "run", "--import", POLICY, "--model", "hf", "--tasks", "kv", "--num_keys", "3",
                      "--num_examples", "1", "--max_new_tokens", "2", "--no_report", "--no_progress", "--out", "ev",
                      cwd=tmp_path)  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert yaml.safe_load((tmp_path / "ev" / "config.yaml").read_text())["import"] == [POLICY]
    assert len((tmp_path / "ev" / "records.jsonl").read_text().splitlines()) == 3  # one example x 3 positions


def test_old_position_options_are_refused_naming_model_position(tmp_path):
    from repo_train.training.checks import upgrade_saved_model_hparams
    from repo_train.training.cli import check_moved_options

    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump({"model": {"position_method": "repo", "repo_curriculum_steps": 100}}))
    new = r"moved: .* write model.position: \{class_path: RepoPosition, init_args: \{curriculum_"
    for argv in (["fit", "--config", str(old)], ["fit", "--model.repo_curriculum_start=1.0"]):
        with pytest.raises(ValueError, match=new):
            check_moved_options(argv)
    with pytest.raises(ValueError, match=r"model.position_method moved: .* write --model.position r2n1"):
        check_moved_options(["fit", "--model.position_method", "r2n1"])
    with pytest.raises(ValueError, match=r"init_args: \{start_layer: 3, hidden_size: 8\}"):
        check_moved_options(["fit", "--model.position_method=repo", "--model.repo_start_layer", "3",
                             "--model.repo_hidden_size", "8"])  # fmt: skip
    # a checkpoint saved before the move resumes with the same method and curriculum, in today's spelling
    saved = {"lr": 1e-3, "position_method": "repo", "repo_start_layer": 2, "repo_hidden_size": None,
             "repo_curriculum_start": 1.0, "repo_curriculum_steps": 50}  # fmt: skip
    assert upgrade_saved_model_hparams(saved) == {
        "lr": 1e-3,
        "position": {
            "class_path": "repo_train.modeling.repo_policy.RepoPosition",
            "init_args": {"start_layer": 2, "hidden_size": None, "curriculum_start": 1.0, "curriculum_steps": 50},
        },
    }
    plan = {"position_method": "r2n1", "repo_start_layer": None, "repo_hidden_size": None, "position_options": {}}
    assert upgrade_saved_model_hparams(plan)["position"]["init_args"] == {"name": "r2n1"}


def test_a_training_data_source_outside_the_project_is_refused_before_its_module_runs(tmp_path, monkeypatch, capsys):
    from repo_train import cli as training_cli

    class_path, marker = _module_with_a_side_effect(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({"data": {"train": {"class_path": class_path, "init_args": {"seq_len": 8}}}}))
    for argv in (["fit", "--config", str(config)], ["fit", "--data.train", class_path]):
        assert training_cli.main([*argv, "--trainer.default_root_dir", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "pass --import sideeffect_pkg.tasks" in err, err
    assert not marker.exists() and not (tmp_path / "run").exists() and "sideeffect_pkg.tasks" not in sys.modules


def test_a_users_task_runs_through_search_run_by_name_or_class_path(tmp_path, monkeypatch, capsys, registries_restored):
    """`search run --import`: the fitness is the harness's build of the user's task (begin/middle/end of its
    num_items), the saved config replays it, and its class_path builds the same search set."""
    from evaluation.model_loading import tiny_default
    from search.cli import main as search
    from search.harness_fitness import HarnessFitness

    out = tmp_path / "scales" / "colour.json"
    args = ["--task.name", "colour_lookup", "--task.num_items", "4", "--task.num_examples", "2", "--ga.generations", "1",
            "--ga",
            "{population: 3, parents: 2, mutation_offspring: 1, crossover_offspring: 0}"]  # fmt: skip
    code = search(["run", "--import", TASK, *args, "--held_out.num_examples", "0", "--no_progress", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    task = json.loads(out.read_text())["search"]["task"]
    assert (task["task"], task["import"], task["rows"]) == ("colour_lookup", TASK, 2 * 3)
    assert task["positions"] == {"begin": 0, "middle": 1, "end": 3} and task["params"]["num_items"] == 4
    saved = out.with_name("colour.config.yaml")
    assert yaml.safe_load(saved.read_text())["import"] == [TASK]
    assert search(["run", "--config", str(saved), "--resume", "--print_config"]) == 0  # it replays the search
    assert capsys.readouterr().out == saved.read_text().replace("resume: false", "resume: true")
    model, tokenizer = tiny_default(0)
    by_path = HarnessFitness(model, tokenizer, f"{TASK}.ColourLookupTask", {"num_items": 4}, num_examples=2)
    assert by_path.task == "colour_lookup" and by_path.data_sha256 == task["data_sha256"]
    # a class_path into a module nobody named is refused before that module runs
    class_path, marker = _module_with_a_side_effect(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert search(["run", "--task.name", class_path, "--out", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pass --import sideeffect_pkg.tasks" in err, err
    assert not marker.exists() and not (tmp_path / "other.json").exists()


def test_an_evaluation_run_option_is_one_field_of_run_config(tmp_path, monkeypatch, capsys):
    """A new `evaluation run` option, added from outside the package as one field of a `RunConfig` subclass (the
    one name the command reads), is in the parser with its docstring as help, in `--print_config` and in the
    run's stored config.yaml, which replays it."""
    (tmp_path / "note_option.py").write_text(
        "from dataclasses import dataclass\n\n"
        "from evaluation.run_config import RunConfig\n\n\n"
        "@dataclass(kw_only=True)\n"
        "class WithNote(RunConfig):\n"
        "    run_note: str = 'none'\n"
        '    """a note kept with the run"""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import note_option

    import evaluation.config

    monkeypatch.setattr(evaluation.config, "RunConfig", note_option.WithNote)
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--run_note RUN_NOTE a note kept with the run (type: str, default: none)" in shown
    out = tmp_path / "out"
    argv = ["run", "--out", str(out), "--run_note", "hello", "--tasks", "kv", "--num_keys", "2", "--num_examples", "1",
            "--gold_positions", "0", "--max_new_tokens", "1", "--no_report", "--no_progress"]  # fmt: skip
    assert cli.main([*argv, "--print_config"]) == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["run_note"] == "hello" and not out.exists()
    assert cli.main(argv) == 0
    assert (out / "config.yaml").read_text() == printed  # the stored config is the dataclass, the new field in it
    capsys.readouterr()
    assert cli.main(["run", "--config", str(out / "config.yaml"), "--print_config"]) == 0  # and it replays
    assert capsys.readouterr().out == printed
