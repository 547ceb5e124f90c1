"""The position-bias recipe and `python -m workflows reproduce-position-bias`: positions, training data, label
matching, aggregation over seeds, the command line, a smoke run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from workflows import position_bias as pb
from workflows import position_bias_results as over_seeds
from workflows.cli import main as workflows_main

#: The reproduction as a user types it.
COMMAND = [sys.executable, "-m", "workflows", "reproduce-position-bias"]


def test_edge_and_evaluated_positions():
    args = pb.parse_args([])
    assert pb.edge_positions(args) == [0, 1, 2, 3, 60, 61, 62, 63]
    assert pb.eval_positions(args) == [0, 9, 18, 27, 36, 45, 54, 63]
    narrow = pb.parse_args(["--pairs", "10", "--edge_width", "2", "--eval_positions", "10"])
    assert pb.edge_positions(narrow) == [0, 1, 8, 9] and pb.eval_positions(narrow) == list(range(10))


def test_training_data_puts_the_gold_at_the_edges(tmp_path):
    args = pb.parse_args(["--pairs", "12", "--edge_width", "2", "--steps", "2", "--edge_share", "1.0"])
    counts = pb.write_training_data(tmp_path / "train.jsonl", seed=0, args=args)
    lines = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert counts == {"examples": 64, "gold_at_edge": 64} and len(lines) == 64
    for line in lines:
        items = line["prompt"].split(" ")
        pairs, key = items[:-1], items[-1]
        assert len(pairs) == 12 and len({p[0] for p in pairs}) == args.distinct_keys
        gold = [i for i, p in enumerate(pairs) if p[0] == key]
        assert len(gold) == 1 and gold[0] in (0, 1, 10, 11)
        assert pairs[gold[0]][1:] == line["completion"]
    args = pb.parse_args(["--pairs", "12", "--edge_width", "2", "--steps", "2", "--edge_share", "0.0"])
    pb.write_training_data(tmp_path / "middle.jsonl", seed=0, args=args)
    for line in (tmp_path / "middle.jsonl").read_text().splitlines():
        record = json.loads(line)
        items = record["prompt"].split(" ")
        assert [p[0] for p in items[:-1]].index(items[-1]) in range(2, 10)


def test_harness_labels_match_their_flags():
    match = pb._label_matches
    assert match("pcd:alpha=0.2,beta=2.5,ratio=0.0001,gamma=30", "pcd")
    assert match("baseline", "baseline") and not match("baseline", "pcd")
    assert match("fim:temperature=5e-05,layers=last_half,dummy=blank,calibration_batch=0", "fim:dummy=blank")
    assert not match("fim:temperature=5e-05,dummy=none", "fim:dummy=blank")
    assert match("caliope:calibrator=moses,delta_gap=10000", "caliope:calibrator=moses")
    assert not match("caliope:calibrator=moses,delta_gap=10000", "caliope:calibrator=hourglass")
    assert match("lpes:scale_file=/x/seed0.json", "lpes:scale_file={scale_file}")
    assert match("pi:scale=1.3", "pi:scale={mean_scale}") and not match("pi:scale=1.3", "pcd")


def _result(by_position: dict[int, float], rho: float | None = 10.0, delta: float | None = None) -> dict:
    cells = {str(p): {"accuracy": a} for p, a in by_position.items()}
    paired = None if delta is None else {"mean_diff": delta, "p_value": 0.01}
    result = {"accuracy": sum(by_position.values()) / len(by_position), "rho": rho, "by_position": cells}
    return {**result, "vs_baseline": paired}


def test_position_stats_and_aggregate_over_seeds():
    edges = [0, 3]
    first = over_seeds.position_stats(_result({0: 1.0, 1: 0.5, 2: 0.0, 3: 1.0}), edges)
    assert first["middle"] == 0.25 and first["edges"] == 1.0 and first["accuracy"] == 0.625
    second = over_seeds.position_stats(_result({0: 1.0, 1: 1.0, 2: 0.5, 3: 0.5}, rho=None, delta=0.25), edges)
    assert first["delta"] is None and second["delta"] == 0.25 and second["delta_p"] == 0.01
    table = over_seeds.aggregate({0: {"baseline": first}, 1: {"baseline": second}})["baseline"]
    assert table["middle"]["mean"] == pytest.approx(0.5)
    assert table["middle"]["std"] == pytest.approx(((0.25 - 0.5) ** 2 + (0.75 - 0.5) ** 2) ** 0.5)
    assert table["rho"] == {"mean": 10.0, "std": None}  # one seed has no rho: no spread to report
    assert table["delta"] == {"mean": 0.25, "std": None} and table["delta_p_by_seed"] == {0: None, 1: 0.01}
    assert table["by_position"][1]["mean"] == pytest.approx(0.75) and table["by_seed"] == {0: 0.625, 1: 0.75}
    one = over_seeds.aggregate({0: {"baseline": first}})["baseline"]
    assert one["accuracy"]["std"] is None and over_seeds._cell(one["accuracy"]) == "0.625"


def test_method_results_refuses_a_missing_method():
    summary = {"results": {"kv": {"baseline": _result({0: 1.0, 1: 1.0})}}}
    with pytest.raises(ValueError, match="method 'lpes'"):
        pb.method_results(summary)


def test_parse_args_errors(capsys):
    for argv, message in (
        (["--distinct_keys", "9"], "--distinct_keys must be in"),
        (["--pairs", "8", "--edge_width", "4"], "--edge_width must be"),
        (["--edge_share", "1.5"], "--edge_share must be in"),
        (["--base", "/nowhere"], "is not an HF model directory"),
    ):
        with pytest.raises(SystemExit):
            pb.parse_args(argv)
        assert message in capsys.readouterr().err


def test_the_command_takes_its_options_as_every_command_does(tmp_path, capsys):
    """--print_config prints the defaults, the options parse, a bad value is one line with exit code 2."""
    # the options printed as given, as every command prints them
    assert workflows_main(["reproduce-position-bias", "--edge_width", "2", "--seeds=1", "--print_config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["out"] == "outputs/position-bias" and printed["steps"] == 400 and printed["lr"] == 0.001
    assert printed["edge_width"] == 2 and printed["seeds"] == 1 and printed["base"] == str(pb.BASE)
    code = workflows_main(["reproduce-position-bias", "--out", str(tmp_path / "pb"), "--eval_positions", "99"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "pb").exists()
    assert err.startswith(f"{pb.PROG}: error: --eval_positions must be in [3, --pairs]"), err


@pytest.mark.slow  # the whole command in a subprocess: trains, searches, evaluates, reruns
def test_smoke_run_writes_results_and_resumes(tmp_path):
    out = tmp_path / "pb"
    command = [*COMMAND, "--out", str(out), "--seeds", "1", "--steps", "2", "--pairs", "16",
               "--eval_examples", "1", "--search_examples", "1", "--generations", "0", "--population", "4"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert set(results["methods"]) == {name for name, _ in pb.METHODS}
    assert results["settings"]["eval_positions"] == [0, 2, 4, 6, 9, 11, 13, 15]
    assert len(results["scales"]["0"]["scales"]) == 4
    assert (out / "accuracy_by_position.png").stat().st_size > 0
    assert "| lpes |" in (out / "results.md").read_text()
    commands = (out / "commands.sh").read_text()
    assert commands.count("python -m repo_train fit") == 1 and "python -m search run" in commands
    # rerun: every step's output exists, so nothing is trained, searched or evaluated again
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0 and "===" not in again.stdout
    assert (out / "commands.sh").read_text() == commands
