"""`python -m search`: a real search end to end on the tiny model, resume after a crash, 2 processes == 1, configs.

Run as a script (`torchrun ... test_search_cli.py OUT`) this file is the worker of the 2-process test.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from search.cli import main
from search.config import ConfigError, SearchConfig, load_config
from search.harness_fitness import HarnessFitness
from search.outputs import output_paths
from search.scale_file_writer import load_scale_file
from search.search_run import run_search

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "search"
TINY = str(CONFIGS / "tiny.yaml")
TIME_FIELDS = ("time_s", "fitness_s")


class HashScored(HarnessFitness):
    """Scores an answer by a hash of (row id, answer): varied fitness values, so selection really happens.

    The tiny random model never answers right (task metric 0 everywhere); this stand-in metric still
    depends on every generated token. `crash_after` simulates a crash after that many `evaluate` calls.
    """

    crash_after: int | None = None
    calls = 0

    def score_record(self, record):
        return float(hashlib.sha256(f"{record['id']}|{record['prediction']}".encode()).digest()[0] % 2)

    def evaluate(self, scales):
        if HashScored.crash_after is not None and HashScored.calls >= HashScored.crash_after:
            raise RuntimeError("simulated crash")
        HashScored.calls += 1
        return super().evaluate(scales)

    def evaluate_questions(self, scales, start, stop):  # racing's scoring calls count as calls too
        if HashScored.crash_after is not None and HashScored.calls >= HashScored.crash_after:
            HashScored.crashed_at = start
            raise RuntimeError("simulated crash")
        HashScored.calls += 1
        return super().evaluate_questions(scales, start, stop)


def _comparable(paths: dict[str, Path]) -> tuple:
    """Everything a search writes that must be reproducible (wall times and file timestamps excluded)."""
    scale = json.loads(paths["scale"].read_text())
    scale["search"].pop("wall_time_s")
    log = [{k: v for k, v in line.items() if k not in TIME_FIELDS} for line in map(json.loads, paths["log"].open())]
    return scale, log, paths["state"].read_bytes()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted hash-scored tiny search in this process."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    HashScored.crash_after, HashScored.calls = None, 0
    out = tmp_path_factory.mktemp("reference") / "tiny.json"
    summary = run_search(load_config(TINY), out, fitness_cls=HashScored)
    torch.set_num_threads(threads)
    return summary, output_paths(out), HashScored.calls


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--resume" in out and "configs/search/lpes.yaml" in out
    assert main([]) == 0


@pytest.mark.slow  # a whole tiny search (~5 s)
def test_tiny_search_end_to_end_with_the_task_metric(tmp_path, capsys):
    out = tmp_path / "scales" / "tiny.json"
    assert main(["run", "--config", TINY, "--out", str(out), "--no_progress"]) == 0
    printed = capsys.readouterr().out
    assert "generation 2/2" in printed and "best fitness 0.0000" in printed and "held-out (4 examples" in printed
    assert "unscaled model on the same search set: 0.0000" in printed
    paths = output_paths(out)
    scale = load_scale_file(out, expected_num_layers=4)
    assert scale.curve == {"type": "bezier", "degree": 2} and len(scale.control_points) == 3
    assert scale.search["generations"] == 2 and scale.search["task"]["positions"] == {"begin": 0, "middle": 1, "end": 3}
    assert set(scale.search["held_out"]) >= {"baseline", "pi_mean", "lpes"}
    assert set(scale.search["unscaled_fitness"]) == {"overall", "per_subset"}  # the fitness plot's reference line
    log = [json.loads(line) for line in paths["log"].open()]
    assert [line["generation"] for line in log] == [0, 1, 2]
    assert all(line["diversity"] is not None and line["time_s"] > 0 for line in log)
    assert sum(line["evaluated"] for line in log) == scale.search["evaluations"]
    for key in ("curve", "fitness"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(paths["state"].read_text())["generation"] == 2

    assert main(["show", str(out), "--num_layers", "4"]) == 0
    shown = capsys.readouterr().out
    assert "valid (format_version 1)" in shown and f"lpes:scale_file={out}" in shown and "pi:scale=" in shown
    # the printed evaluate command rebuilds the search's task (same build parameters, gold at every position) on
    # the examples after the search's fitness (0-3) and held-out (4-7) ones
    import shlex

    from evaluation.config import add_run_options, resolve
    from evaluation.tasks import build_task
    from repo_common.config_cli import ConfigParser

    command = shlex.split(next(line for line in shown.splitlines() if line.startswith("evaluate")))
    parser = ConfigParser.for_command("python -m evaluation run", "")
    add_run_options(parser)
    eval_args, _ = parser.parse(command[command.index("run") + 1 :])
    task = scale.search["task"]
    (rebuilt,) = resolve(eval_args).run.tasks
    expected = {key: value for key, value in task["params"].items() if value is not None}  # None = the default
    assert rebuilt == build_task(
        task["task"], **{**expected, "num_examples": 4, "example_offset": 8, "gold_positions": "all"}
    )


@pytest.mark.slow  # a tiny racing search scored by the gold answer's log-probability (~5 s)
def test_gold_loglik_search_races_and_records_its_score(tmp_path, capsys):
    out = tmp_path / "loglik.json"
    racing = "{fractions: [0.5, 1.0], min_questions: 2}"
    argv = ["run", "--config", TINY, "--task.score", "gold_loglik", "--ga.racing", racing, "--out", str(out)]
    assert main([*argv, "--ga.generations", "1", "--no_progress"]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.endswith("racing in stages of 2, 4 questions, none dropped before 2"), first_line
    scale = load_scale_file(out, expected_num_layers=4)
    assert scale.search["task"]["score"] == "gold_loglik"
    # mean log-probabilities per token: below 0, and distinct for the candidates (the random model's EM is all 0)
    assert scale.fitness["overall"] < 0 and scale.search["held_out"]["lpes"]["overall"] < 0
    log = [json.loads(line) for line in output_paths(out)["log"].open()]
    assert len({line["best"] for line in log} | {line["mean"] for line in log}) > 1
    assert main(["show", str(out)]) == 0
    assert "(gold answer's mean log-probability per token)" in capsys.readouterr().out
    # another score is another fitness: the state refuses it
    assert main(["run", "--config", TINY, "--ga.racing", racing, "--out", str(out), "--resume", "--no_progress"]) == 2
    assert "metric or task.score): resume with the same ones" in capsys.readouterr().err


@pytest.mark.slow  # two whole searches (the reference fixture and the crashed + resumed one)
def test_resume_after_a_crash_runs_only_the_rest_and_ends_the_same(tmp_path, reference):
    _, reference_paths, reference_calls = reference
    assert reference_calls == 5  # generations 0, 1, 2, the unscaled model and the held-out check
    out = tmp_path / "tiny.json"
    HashScored.crash_after, HashScored.calls = 2, 0
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_search(load_config(TINY), out, fitness_cls=HashScored)
    paths = output_paths(out)
    assert json.loads(paths["state"].read_text())["generation"] == 1 and not out.exists()
    assert len(paths["log"].read_text().splitlines()) == 2

    assert main(["run", "--config", TINY, "--out", str(out)]) == 2  # no --resume: refused, state kept

    HashScored.crash_after, HashScored.calls = None, 0
    run_search(load_config(TINY), out, resume=True, fitness_cls=HashScored)
    assert HashScored.calls == 3  # generation 2, the unscaled model and the held-out check only
    assert _comparable(paths) == _comparable(reference_paths)


@pytest.mark.slow  # two racing searches on the tiny model (uninterrupted, crashed + resumed)
def test_racing_resumed_after_a_crash_mid_generation_ends_with_the_same_files(tmp_path):
    import dataclasses

    from search.racing import RacingConfig

    tiny = load_config(TINY)
    config = dataclasses.replace(
        tiny, ga=dataclasses.replace(tiny.ga, racing=RacingConfig((0.5, 1.0), min_questions=2))
    )
    HashScored.crash_after, HashScored.calls = None, 0
    run_search(config, tmp_path / "whole.json", fitness_cls=HashScored)
    out = tmp_path / "tiny.json"
    HashScored.crash_after, HashScored.calls = 3, 0  # generation 0 scores 2 question stages: the 4th call is
    with pytest.raises(RuntimeError, match="simulated crash"):  # generation 1's second stage
        run_search(config, out, fitness_cls=HashScored)
    assert HashScored.crashed_at == 2 and json.loads(output_paths(out)["state"].read_text())["generation"] == 0
    HashScored.crash_after, HashScored.calls = None, 0
    run_search(config, out, resume=True, fitness_cls=HashScored)
    assert _comparable(output_paths(out)) == _comparable(output_paths(tmp_path / "whole.json"))
    assert load_scale_file(out).search["ga"]["racing"]["fractions"] == [0.5, 1.0]


@pytest.mark.slow  # torchrun: the search on two processes
def test_two_processes_equal_one(tmp_path, reference):
    summary, reference_paths, _ = reference
    assert len({line["best"] for line in map(json.loads, reference_paths["log"].open())} | {0.0}) > 1  # non-trivial
    out = tmp_path / "tiny.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, str(out)]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _comparable(output_paths(out)) == _comparable(reference_paths)
    assert load_scale_file(out).fitness == summary["fitness"]


@pytest.mark.parametrize(
    ("config_text", "argv", "message"),
    [
        ("ga: {popultion: 3}", [], "unknown key 'ga.popultion' in ga; valid keys are"),
        ("task: {num_items: many}", [], "option --task.num_items: expected int, got 'many'"),
        ("ga: {population: 7}", [], "change the counts so they add up"),
        ("task: {name: qa}", [], "task.name 'qa' is not a registered task; choose from ['babi_qa2', "),
        ("- a list", [], "top level must be a mapping"),
        ("", ["--model.path", "/no/such/model"], "no such directory; pass a local HF model directory"),
        ("", ["--task.data_dir", "/no/such/dir"], "is not a directory; download qa_data/nq-open-oracle.jsonl.gz"),
        ("model: {num_layers: 32}", [], "config is for a 32-layer model, but the model has 4 layers"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(tmp_path, capsys, config_text, argv, message):
    config = tmp_path / "c.yaml"
    config.write_text(config_text)
    code = main(["run", "--config", str(config), "--out", str(tmp_path / "s.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_other_mistakes(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "s.json"), "--ga.generations", "many"]) == 2
    assert capsys.readouterr().err == (
        "python -m search run: error: option --ga.generations: expected int, got 'many' "
        "(see python -m search run --help)\n"
    )
    assert main(["run", "--out", str(tmp_path / "s.txt")]) == 2
    assert "must name a .json scale file" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "no scale file at" in capsys.readouterr().err
    assert main(["run", "--config", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "s.json")]) == 2
    assert "no config file at" in capsys.readouterr().err


def test_every_shipped_config_loads():
    shipped = {path.name: load_config(path) for path in sorted(CONFIGS.glob("*.yaml"))}
    assert set(shipped) == {
        "lpes.yaml", "lpes-vicuna-mdqa10.yaml", "lpes-qwen-kv50.yaml", "tiny.yaml", "quick.yaml", "smollm2-mdqa.yaml"
    }  # fmt: skip
    assert shipped["lpes.yaml"] == SearchConfig()  # the file spells out the paper defaults
    assert shipped["tiny.yaml"] == SearchConfig.tiny()
    paper = shipped["lpes.yaml"]
    assert (paper.ga.population, paper.ga.parents, paper.ga.generations) == (32, 12, 20)
    assert paper.weights.as_dict() == {"begin": 0.2, "middle": 0.3, "end": 0.5}
    assert (paper.space.curve, paper.space.num_points, paper.task.num_examples) == ("bezier", 4, 200)
    vicuna, qwen = shipped["lpes-vicuna-mdqa10.yaml"], shipped["lpes-qwen-kv50.yaml"]
    assert (vicuna.model.num_layers, vicuna.task.name, vicuna.task.num_items) == (32, "mdqa", 10)
    assert (qwen.model.num_layers, qwen.task.name, qwen.task.num_items) == (28, "kv", 50)
    smollm2 = shipped["smollm2-mdqa.yaml"]  # the real-model racing measurement's (docs/measurements)
    assert (smollm2.task.name, smollm2.task.num_items, smollm2.ga.population) == ("mdqa", 5, 4)
    for config in shipped.values():
        assert config.space.build(config.model.num_layers or 4).initial()
        assert SearchConfig.from_dict(config.to_dict()) == config  # YAML/JSON round trip
    with pytest.raises(ConfigError, match="weights"):
        SearchConfig.from_dict({"weights": {"begin": 0.5, "middle": 0.5, "end": 0.5}})


if __name__ == "__main__":  # the torchrun worker of test_two_processes_equal_one
    torch.set_num_threads(1)
    run_search(load_config(TINY), sys.argv[1], fitness_cls=HashScored)


def test_short_kv_keys_reach_the_task(tmp_path):
    import dataclasses

    from search.config import TaskConfig
    from search.prepare import task_parameters

    task = dataclasses.replace(TaskConfig(), name="kv", num_items=6, key_chars=4)
    assert task_parameters(task) == {"path": None, "num_keys": 6, "key_chars": 4}
    (tmp_path / "kv-retrieval-6_keys.jsonl").write_text("")
    with pytest.raises(ValueError, match="cannot apply to a release file"):
        task_parameters(dataclasses.replace(task, data_dir=str(tmp_path)))


def test_distinct_keys_reach_the_task():
    import dataclasses

    from search.config import TaskConfig
    from search.prepare import task_parameters

    task = dataclasses.replace(TaskConfig(), name="kv", num_items=30, key_chars=1, template="pairs", distinct_keys=8)
    params = task_parameters(task)
    assert params == {"path": None, "num_keys": 30, "key_chars": 1, "template": "pairs", "distinct_keys": 8}
    from evaluation.tasks import build_task

    rows = list(build_task("kv", **params, num_examples=1, gold_positions=[29]).rows())
    assert rows[0]["num_positions"] == 30 and rows[0]["gold_position"] == 29
