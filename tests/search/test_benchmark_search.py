"""`python -m workflows benchmark-search` at its smallest: the racing-vs-plain table's structure and invariants (no timings)."""

from __future__ import annotations

import argparse
import json
from itertools import pairwise
from pathlib import Path

import pytest
from workflow_commands import parse_args

from workflows.benchmarks import search_measure
from workflows.benchmarks.search import measure
from workflows.benchmarks.search_report import write_report

COMMAND = "benchmark-search"
SMALLEST = [
    "--questions", "8", "--held_out", "8", "--population", "5", "--parents", "2", "--crossover", "1",
    "--generations", "1", "--min_questions", "2", "--fractions", "[0.5, 1.0]", "--seeds", "[0]",
]  # fmt: skip


@pytest.mark.slow  # two tiny searches on the dip base and their held-out scoring, ~1 min on a loaded machine
@pytest.mark.usefixtures("one_thread")
def test_smallest_benchmark_prints_the_racing_table_with_consistent_numbers(tmp_path, capsys):
    report = measure(parse_args(COMMAND, [*SMALLEST, "--json", str(tmp_path / "bench.json")]))
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "bench.json").read_text()) == json.loads(json.dumps(report))
    for text in ("plain GA's final held-out fitness", "racing/plain to reach: prompts", "(target <= 0.333)"):
        assert text in printed
    assert "racing's final held-out fitness inside the plain GA's CI: " in printed

    (seed,) = report["seeds"]
    final = seed["plain_final"]
    assert final["low"] <= final["fitness"] <= final["high"]
    prompts_per_candidate = 8 * 3  # 8 questions at begin, middle and end
    for name in ("plain", "racing"):
        curve = seed["curves"][name]
        assert [line["generation"] for line in curve] == [0, 1]
        assert all(a["prompts"] <= b["prompts"] and a["seconds"] < b["seconds"] for a, b in pairwise(curve))
        assert all(0 <= line["held_out"] <= 1 for line in curve)
        assert seed[name]["final"] == curve[-1]
        assert curve[-1]["prompts"] <= (5 + 1 * (5 - 2 + 1)) * prompts_per_candidate  # the budget's bound
    plain, racing = seed["curves"]["plain"], seed["curves"]["racing"]
    assert plain[0]["prompts"] == 5 * prompts_per_candidate  # generation 0: 5 distinct candidates, every prompt
    assert racing[0]["prompts"] <= plain[0]["prompts"]  # the same 5 candidates, some perhaps dropped halfway
    assert (racing[0]["prompts"] < plain[0]["prompts"]) == (racing[0]["dropped"] > 0)
    assert all(line["dropped"] == 0 for line in plain)
    # racing's evaluations by stage add up to its prompts, generation by generation
    spent = [a["prompts"] - b["prompts"] for a, b in zip(racing, [{"prompts": 0}, *racing])]
    assert spent == [sum(line["stage_questions"]) * 3 for line in racing]
    assert racing[0]["stage_questions"][0] == 5 * 4  # generation 0: all 5 candidates on the first 4 questions
    assert seed["start_inside_plain_ci"] == (final["low"] <= seed["start_held_out"] <= final["high"])
    # the plain GA reaches its own final result; the ratios and verdicts follow from the numbers above
    reached = seed["plain"]["reached"]
    assert reached is not None and reached["held_out"] >= final["low"]
    ratios = seed["ratios"]
    assert ratios["prompts_total"] == racing[-1]["prompts"] / plain[-1]["prompts"]
    if seed["racing"]["reached"] is not None:
        assert ratios["prompts_to_reach"] == seed["racing"]["reached"]["prompts"] / reached["prompts"]
    held = racing[-1]["held_out"]
    assert seed["racing_inside_plain_ci"] == (final["low"] <= held <= final["high"])
    summary = report["summary"]
    assert summary["seeds"] == 1 and summary["prompts_total"]["median"] == ratios["prompts_total"]


REPO = Path(__file__).resolve().parents[2]
MEASURED = "docs/measurements/racing-smollm2-mdqa5-loglik-pop12-gen0-seed{}.json"  # 2026-11-27's two rounds


def test_combine_reads_rounds_run_apart_as_one_summary(tmp_path, capsys):
    paths = [str(REPO / MEASURED.format(seed)) for seed in (1, 2)]
    rounds = [json.loads(Path(path).read_text()) for path in paths]
    report = measure(parse_args(COMMAND, ["--combine", json.dumps(paths), "--json", str(tmp_path / "c.json")]))
    printed = capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(json.dumps(report))
    assert report["seeds"] == [*rounds[0]["seeds"], *rounds[1]["seeds"]]
    assert report["settings"]["seeds"] == [1, 2] and report["settings"]["population"] == 12
    ratios = sorted(r["seeds"][0]["ratios"]["prompts_to_reach"] for r in rounds)
    summary = report["summary"]["prompts_to_reach"]
    assert (summary["min"], summary["max"]) == (ratios[0], ratios[1])
    assert summary["median"] == pytest.approx(sum(ratios) / 2, rel=1e-12)
    assert report["summary"]["seeds"] == 2 and "over 2 seed(s)" in printed
    assert printed.count("plain GA's final held-out fitness") == 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["settings"].update(population=6), "was run with population=6"),
        (lambda r: r["seeds"][0].update(seed=1), "seed 1 is in more than one report"),
        (lambda r: r.pop("seeds"), "is not a report of this benchmark"),
    ],
)
def test_combine_refuses_reports_that_do_not_belong_together_in_one_line(tmp_path, capsys, edit, message):
    first = str(REPO / MEASURED.format(1))
    second = json.loads((REPO / MEASURED.format(2)).read_text())
    edit(second)
    (tmp_path / "second.json").write_text(json.dumps(second))
    with pytest.raises(SystemExit) as exit_info:
        parse_args(COMMAND, ["--combine", json.dumps([first, str(tmp_path / "second.json")])])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1


def test_combine_names_a_missing_report(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(COMMAND, ["--combine", json.dumps([str(tmp_path / "gone.json")])])
    assert "gone.json: no such file; give reports that" in capsys.readouterr().err


def _canned_round(seed: int) -> dict:
    """A measured round relabelled as `seed`: what a finished round looks like, without running one."""
    (result,) = json.loads((REPO / MEASURED.format(1)).read_text())["seeds"]
    return {**result, "seed": seed}


class _Stop(Exception):
    """Stands in for a kill in the middle of a round."""


def test_every_finished_round_is_written_and_resume_runs_only_the_missing_seeds(tmp_path, capsys, monkeypatch):
    report_path = tmp_path / "bench.json"
    argv = [*SMALLEST[:-2], "--seeds", "[0, 1, 2]", "--json", str(report_path)]
    ran = []

    def stopped_at_seed_1(args, space, fitness, held_out, seed, work):
        ran.append(seed)
        if seed == 1:
            raise _Stop
        return _canned_round(seed)

    monkeypatch.setattr(search_measure, "race_one_seed", stopped_at_seed_1)
    with pytest.raises(_Stop):
        measure(parse_args(COMMAND, argv))
    written = json.loads(report_path.read_text())
    assert [r["seed"] for r in written["seeds"]] == [0] and written["summary"]["seeds"] == 1  # seed 0 survived

    def finishing(args, space, fitness, held_out, seed, work):
        ran.append(seed)
        return _canned_round(seed)

    monkeypatch.setattr(search_measure, "race_one_seed", finishing)
    report = measure(parse_args(COMMAND, [*argv, "--resume", "true"]))
    assert ran == [0, 1, 1, 2]  # seed 0 was not run again
    assert [r["seed"] for r in report["seeds"]] == [0, 1, 2] and report["seeds"][0] == written["seeds"][0]
    assert json.loads(report_path.read_text()) == json.loads(json.dumps(report))
    assert report["settings"]["seeds"] == [0, 1, 2] and report["summary"]["seeds"] == 3
    assert f"kept from {report_path}:" in capsys.readouterr().out

    def must_not_run(*args):
        raise AssertionError("every seed is in the report: nothing may run")

    monkeypatch.setattr(search_measure, "race_one_seed", must_not_run)
    again = measure(parse_args(COMMAND, [*argv, "--resume", "true"]))  # all done: prints the report, loads no model
    assert again == json.loads(json.dumps(report))


def _resume_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(COMMAND, argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    return error


def test_resume_refuses_a_report_of_other_settings_or_seeds_in_one_line(tmp_path, capsys):
    report_path = tmp_path / "bench.json"
    argv = [*SMALLEST[:-2], "--json", str(report_path), "--resume", "true"]
    settings = vars(parse_args(COMMAND, [*argv, "--seeds", "[0]"]))
    write_report(argparse.Namespace(**{**settings, "seeds": [0, 7]}), [_canned_round(0), _canned_round(7)])
    assert "holds seed 7, which --seeds does not list" in _resume_error([*argv, "--seeds", "[0]"], capsys)
    error = _resume_error([*argv, "--seeds", "[0, 7]", "--population", "6"], capsys)
    assert "was run with population=5, this run has 6" in error
    assert "pass --json FILE too" in _resume_error([*SMALLEST, "--resume", "true"], capsys)
    assert "already exists: pass --resume true" in _resume_error([*SMALLEST, "--json", str(report_path)], capsys)
