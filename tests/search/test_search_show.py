"""`python -m search show`: its evaluation command runs as printed (examples the search did not use, the search's
prompt options) and a result that does not beat the unscaled model is said so."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_helpers import scale_json

from evaluation.config import add_run_options, resolve
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.search_overlap import FittedExamples, SearchOverlapError, check_disjoint
from evaluation.tasks import build_task
from evaluation.tasks.base import source_fingerprint
from repo_common.config_cli import ConfigParser
from search.cli import main
from search.scale_file_writer import load_scale_file
from search.show import evaluation_command, evaluation_task_flags

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "configs" / "search" / "tiny.yaml")


def fingerprints(name: str, params: dict, offset: int, count: int) -> list[str]:
    """The content fingerprints of examples offset … offset + count − 1, as a search records them."""
    task = build_task(name, **params, num_examples=count, example_offset=offset, gold_positions=[0])
    return [source_fingerprint(row) for row in task.rows()]


def kv_search_file(tmp_path: Path, **search_changes) -> Path:
    """A scale file as the tiny search writes it (generated kv, 4 keys, tiny default of seed 0): fitness examples
    0-3 and held-out 4-7 of seed 0, with their real fingerprints."""
    params = {"path": None, "num_keys": 4, "seed": 0, "gold_positions": [0, 1, 3]}
    used = fingerprints("kv", {"num_keys": 4, "seed": 0}, 0, 8)
    search = {
        **scale_json()["search"],
        "task": {"task": "kv", "params": params, "num_examples": 4, "score": "metric", "max_new_tokens": 3,
                 "prompt_format": {"chat_template": False, "system_prompt": None}},
        "examples_used": {"task": "kv", "fitness": {"example_offset": 0, "num_examples": 4, "seed": 0},
                          "held_out": {"example_offset": 4, "num_examples": 4, "seed": 0}, "fingerprints": used},
        "held_out": {"num_examples": 4, "example_offset": 4, "seed": 0,
                     "baseline": {"overall": 0.25, "per_subset": {"begin": 0.5, "middle": 0.0, "end": 0.25}},
                     "pi_mean": {"scale": 1.5, "overall": 0.2, "per_subset": {"begin": 0.5, "middle": 0.0, "end": 0.2}},
                     "lpes": {"overall": 0.15, "per_subset": {"begin": 0.25, "middle": 0.0, "end": 0.15}}},
        "run_config": {"task": {"batch_size": 4, "max_length": None, "truncate": None},
                       "model": {"dtype": "float32", "attn_implementation": "sdpa"}},
        **search_changes,
    }  # fmt: skip
    model = {"name": "tiny-default(seed=0)", "config_sha256": "0" * 64, "weight_files": {"tiny_default_seed": 0}}
    path = tmp_path / "scales" / "tiny.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(scale_json(search=search, model=model)))
    return path


def parsed_run(argv: list[str]):
    """The printed command as `python -m evaluation run` resolves it."""
    parser = ConfigParser.for_command("python -m evaluation run", "")
    add_run_options(parser)
    options, _ = parser.parse(argv[argv.index("run") + 1 :])
    return resolve(options).run


class Searched:
    """A method with a search record, as evaluation's lpes method is (its `fitted_examples`)."""

    def __init__(self, fitted):
        self.fitted = fitted

    def fitted_examples(self):
        return self.fitted


def test_the_printed_command_evaluates_past_every_example_the_search_used(tmp_path):
    path = kv_search_file(tmp_path)
    data = load_scale_file(path)
    argv, note = evaluation_command(data, str(path), 1.5)
    assert argv[:4] == [sys.executable, "-m", "evaluation", "run"] and "--model" not in argv  # the tiny default
    assert argv[argv.index("--example_offset") + 1] == "8" and argv[argv.index("--num_examples") + 1] == "4"
    assert (
        argv[argv.index("--seed") + 1] == "0" and "--max_new_tokens" in argv and argv[-2:] == ["--out", "results/tiny"]
    )
    assert "examples 8-11: after the search's own (fitness 0-3, held-out 4-7)" in note
    run = parsed_run(argv)
    (task,) = run.tasks
    fitted = FittedExamples.from_record(str(path), data.search["examples_used"])
    read = lambda: {source_fingerprint(row) for row in task.rows()}
    report = check_disjoint([("kv", read)], [("lpes", [Searched(fitted)])])  # refuses any shared example
    assert report["lpes"]["kv"]["shared_examples"] == 0 and report["lpes"]["kv"]["examples"] == 4
    # what show printed before: the search's own examples, which evaluation refuses
    old = build_task("kv", num_keys=4, seed=0, num_examples=4, gold_positions="all")
    with pytest.raises(SearchOverlapError, match="4 of the 4 kv examples of this run were used by its search"):
        check_disjoint([("kv", lambda: {source_fingerprint(r) for r in old.rows()})], [("lpes", [Searched(fitted)])])


def test_the_command_carries_every_prompt_option_of_the_search():
    task = {"task": "mdqa", "params": {"path": "data/x.jsonl.gz", "num_documents": 5, "seed": 3, "gold_positions": [0]},
            "num_examples": 6, "score": "gold_loglik", "max_new_tokens": 24,
            "prompt_format": {"chat_template": True, "system_prompt": "Answer briefly."}}  # fmt: skip
    run_config = {"task": {"batch_size": 2, "max_length": 900, "truncate": "middle"},
                  "model": {"dtype": "bfloat16", "attn_implementation": "eager"}}  # fmt: skip
    model = {"name": "models/m", "weight_files": {"model.safetensors": {}}}
    flags = evaluation_task_flags(task, run_config, model, example_offset=14, num_examples=20)
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--chat_template"] == "true" and pairs["--system_prompt"] == "Answer briefly."
    assert pairs["--score"] == "gold_loglik" and pairs["--max_new_tokens"] == "24" and pairs["--max_length"] == "900"
    assert pairs["--truncate"] == "middle" and pairs["--batch_size"] == "2"
    assert pairs["--dtype"] == "bfloat16" and pairs["--attn_implementation"] == "eager"
    assert pairs["--example_offset"] == "14" and pairs["--num_examples"] == "20" and pairs["--seed"] == "3"
    # the tiny default's weights follow --seed: its seed is the model's, the task's goes through --task_param
    tiny = {"name": "tiny-default(seed=7)", "weight_files": {"tiny_default_seed": 7}}
    flags = evaluation_task_flags(task, run_config, tiny)
    assert flags[flags.index("--seed") + 1] == "7" and "mdqa:seed=3" in flags and "--dtype" not in flags


def test_a_data_file_with_no_unused_example_gets_no_command(tmp_path):
    """The packaged MDQA sample has 40 questions: a search that used all of them leaves nothing to evaluate on,
    and one that used 35 leaves 5 (fewer than its 10 held-out ones: said)."""
    params = {"path": str(NQ_OPEN_ORACLE), "num_documents": 3, "seed": 0, "gold_positions": [0, 1, 2]}
    for used, expected in ((40, None), (35, 5)):
        task = {"task": "mdqa", "params": params, "num_examples": used - 10}
        examples_used = {"task": "mdqa", "fitness": {"example_offset": 0, "num_examples": used - 10, "seed": 0},
                         "held_out": {"example_offset": used - 10, "num_examples": 10, "seed": 0},
                         "fingerprints": fingerprints("mdqa", {"path": str(NQ_OPEN_ORACLE), "num_documents": 3},
                                                      0, used)}  # fmt: skip
        search = {
            **scale_json()["search"],
            "task": task,
            "examples_used": examples_used,
            "held_out": {"num_examples": 10},
        }
        path = tmp_path / f"{used}.json"
        path.write_text(json.dumps(scale_json(search=search)))
        argv, note = evaluation_command(load_scale_file(path), str(path), 1.5)
        if expected is None:
            assert argv is None and note.startswith("no evaluation command: its data has no example after the 40")
        else:
            assert argv[argv.index("--num_examples") + 1] == "5" and "the data has 5 unused examples there" in note


def test_show_warns_when_the_result_scores_below_the_unscaled_model(tmp_path, capsys):
    path = kv_search_file(tmp_path)
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert (
        "WARNING    the searched scales score below the unscaled model on the 4 held-out questions: LPES 0.1500, "
        "unscaled 0.2500; this file is not expected to help"
    ) in shown
    beats = kv_search_file(tmp_path, outcome={"compared_on": "held-out", "lpes": 0.3, "unscaled": 0.25,
                                              "beats_unscaled": True, "warning": None})  # fmt: skip
    assert main(["show", str(beats)]) == 0
    assert (
        "outcome    beats the unscaled model on the held-out: LPES 0.3000, unscaled 0.2500" in capsys.readouterr().out
    )


def test_a_file_without_a_task_record_says_why_it_has_no_command(tmp_path, capsys):
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(scale_json()))
    assert main(["show", str(path)]) == 0
    assert "no evaluation command: the file records no search task (hand-made or older)" in capsys.readouterr().out


@pytest.mark.slow  # a tiny search, its printed evaluation command in a subprocess, both again (~60 s)
def test_a_tiny_search_s_printed_command_runs_as_printed(tmp_path, capsys):
    out = tmp_path / "scales" / "tiny.json"
    assert main(["run", "--config", TINY, "--out", str(out), "--no_progress"]) == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "warning: the searched scales score the same as the unscaled model on the 4 held-out questions" in err
    outcome = load_scale_file(out).search["outcome"]
    assert outcome["beats_unscaled"] is False and outcome["left_start"] is True  # all 0: selection had nothing
    assert outcome["every_candidate_scored"] == 0.0 and "never left its start" in outcome["warning"]
    printed_by_run = [line for line in captured.out.splitlines() if line.startswith("evaluate")]
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "WARNING    the searched scales score the same as the unscaled model" in shown
    line = next(line for line in shown.splitlines() if line.startswith("evaluate"))
    assert printed_by_run == [line]  # `search run` ends with the evaluation `search show` prints
    argv = shlex.split(line.removeprefix("evaluate"))
    assert argv[:3] == [sys.executable, "-m", "evaluation"]
    # as pasted, in a shell where the environment is not active: no virtual environment's bin on PATH
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not Path(p, "python").exists())
    env = {**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, "PATH": path or "/usr/bin:/bin"}
    result = subprocess.run(line.removeprefix("evaluate").strip(), shell=True, cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = (tmp_path / "results" / "tiny" / "records.jsonl").read_text()
    assert {json.loads(r)["method"] for r in records.splitlines()} == {
        "baseline",
        f"lpes:scale_file={out}",
        "pi:scale=1.5",
    }
    assert len(records.splitlines()) == 3 * 4 * 4  # 3 methods × 4 examples × 4 gold positions
    # replayed (a commands.sh run again): the finished search changes nothing, so the evaluation that pinned its
    # scale file resumes instead of refusing a file that changed under it
    before = out.read_bytes()
    assert main(["run", "--config", TINY, "--out", str(out), "--resume", "--no_progress"]) == 0
    assert "is this search's finished result (state at generation 2, same config): nothing to do" in (
        capsys.readouterr().out
    )
    assert out.read_bytes() == before
    again = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "results" / "tiny" / "records.jsonl").read_text() == records  # nothing to generate
