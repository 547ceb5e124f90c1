"""`python -m workflows study-real-model`: its data split, verdict rules and options (fast), and the --quick study
(slow)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from workflow_commands import parse_args as parse_command_args

from evaluation.sample_data import NQ_OPEN_ORACLE
from repo_common.config_cli import ConfigParser
from workflows.cli import main
from workflows.real_model_study.command import DESCRIPTIONS, SIZES, add_arguments
from workflows.real_model_study.data import DATA_NAME, count_questions, questions_needed, split_data
from workflows.real_model_study.methods import bucket_bases, caliope_method, eval_command, lpes_name, main_methods
from workflows.real_model_study.report import method_rows, report
from workflows.real_model_study.speed import projected_seconds
from workflows.real_model_study.verdicts import claim_verdict, claims, dip_verdict, shape_verdict

COMMAND = "study-real-model"


def parse_args(argv: list[str]):
    return parse_command_args(COMMAND, argv)


def study_main(argv: list[str]) -> int:
    return main([COMMAND, *argv])


def _questions(path):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["question"] for line in handle if line.strip()]


def test_search_and_evaluation_questions_are_disjoint(tmp_path):
    size = dict(SIZES["quick"], search_questions=2, held_out=3, questions=5, documents=3)
    folders = split_data(NQ_OPEN_ORACLE, tmp_path, size)
    search = _questions(folders["search"] / DATA_NAME)
    evaluation = _questions(folders["eval"] / DATA_NAME)
    source = _questions(NQ_OPEN_ORACLE)
    assert not set(search) & set(evaluation)
    assert search == source[: len(search)] and evaluation == source[len(search) : len(search) + len(evaluation)]
    assert len(search) >= size["search_questions"] + size["held_out"] and len(evaluation) >= size["questions"]
    before = (folders["eval"] / DATA_NAME).stat().st_mtime_ns
    split_data(NQ_OPEN_ORACLE, tmp_path, size)  # a rerun keeps the files
    assert (folders["eval"] / DATA_NAME).stat().st_mtime_ns == before


def test_a_file_too_small_for_the_sizes_is_refused(tmp_path):
    size = dict(SIZES["full"], questions=500)
    with pytest.raises(ValueError, match="lower the sizes or pass a larger file"):
        split_data(NQ_OPEN_ORACLE, tmp_path, size)


@pytest.mark.parametrize(
    ("vs", "questions", "verdict"),
    [
        ({"mean_diff": 0.2, "low": 0.05, "high": 0.3, "p_holm": 0.01}, 20, "reproduced"),
        ({"mean_diff": 0.2, "low": 0.05, "high": 0.3, "p_holm": 0.01}, 5, "cannot tell at this power"),
        ({"mean_diff": 0.1, "low": -0.05, "high": 0.3, "p_holm": 0.3}, 20, "reproduced in direction (not significant)"),
        ({"mean_diff": -0.1, "low": -0.2, "high": 0.02, "p_holm": 0.3}, 20, "not reproduced"),
        ({"mean_diff": -0.2, "low": -0.3, "high": -0.1, "p_holm": 0.01}, 20, "not reproduced (hurts)"),
        ({"mean_diff": -0.05, "low": -0.3, "high": 0.2, "p_holm": 0.8}, 20, "cannot tell at this power"),
        ({"mean_diff": 0.0, "low": 0.0, "high": 0.0, "p_holm": None, "identical": True}, 20,
         "not reproduced (no answer changed)"),
        ({"mean_diff": 0.0, "low": 0.0, "high": 0.0, "p_holm": 1.0, "identical": True, "constant_score": 0.0}, 20,
         "cannot tell (every score 0, with and without the method)"),
        ({"mean_diff": -0.3, "low": -0.4, "high": -0.2, "p_holm": 0.01, "no_answers": True}, 20,
         "cannot tell (the method gave no answers)"),
        (None, 20, "cannot tell at this power"),
    ],
)  # fmt: skip
def test_claim_verdicts(vs, questions, verdict):
    assert claim_verdict(vs, questions) == verdict


def test_a_log_likelihood_claim_is_not_reproduced_only_when_every_gain_is_ruled_out():
    """Accuracy: a CI below +5 points rules the claim out; the gold log-likelihood has no such size, so only a CI
    below 0 does."""
    small = {"mean_diff": -0.01, "low": -0.05, "high": 0.02, "p_holm": 0.6}
    assert claim_verdict(small, 20) == "not reproduced"
    assert claim_verdict(small, 20, "gold_loglik") == "cannot tell at this power"
    below = {"mean_diff": -0.1, "low": -0.2, "high": -0.01, "p_holm": 0.2}
    assert claim_verdict(below, 20, "gold_loglik") == "not reproduced"


def test_gold_loglik_study_scores_every_step_by_it_and_projects_no_pcd():
    args = parse_args(["--quick", "--score", "gold_loglik"])
    command = eval_command(Path("m"), Path("d"), Path("o"), ["baseline"], 3, args.size, args)
    assert command[command.index("--score") + 1] == "gold_loglik"
    speed = {"prompts_per_second": 1.0}
    metric = projected_seconds(args.size, speed)["evaluation"]
    assert projected_seconds(args.size, {**speed, "score": "gold_loglik"})["evaluation"] == metric * 6 / 8


def test_each_size_option_names_its_default_at_the_full_size():
    """The size options' help is written out in their docstrings: it must say what `SIZES["full"]` holds."""
    parser = ConfigParser.for_command("study", "")
    add_arguments(parser)
    for key, value in SIZES["full"].items():
        assert parser._option_string_actions[f"--{key}"].help.endswith(f"(full: {value})"), key


def test_a_study_directory_of_the_other_score_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    (out / "commands.sh").write_text(f"#!/usr/bin/env bash\n# {DESCRIPTIONS[0]}\n")
    (out / "speed.json").write_text(json.dumps({"prompts_per_second": 1.0, "mean_prompt_tokens": 400}))
    (out / "config.yaml").write_text("score: metric\n")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    code = study_main(["--quick", "--score", "gold_loglik", "--out", str(out), "--dry_run"])
    err = capsys.readouterr().err
    assert code == 2 and "holds a study scored by metric, not --score gold_loglik: pass another --out" in err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_dip_verdicts_read_the_paired_middle_minus_edges():
    def result(value, low, high):
        return {"middle_minus_edges": value, "middle_minus_edges_ci": [low, high]}

    assert dip_verdict(result(-0.17, -0.25, -0.10), 40).startswith("reproduced (the middle below the edges")
    assert dip_verdict(result(-0.05, -0.15, 0.04), 40) == "reproduced in direction (not significant)"
    assert dip_verdict(result(0.10, 0.02, 0.20), 40).startswith("not reproduced")
    assert dip_verdict(result(0.01, -0.05, 0.08), 40) == "cannot tell at this power"
    assert dip_verdict(result(-0.17, -0.25, -0.10), 3) == "cannot tell at this power"
    assert dip_verdict({"middle_minus_edges": None, "middle_minus_edges_ci": None}, 40) == ("cannot tell at this power")


def test_shape_verdicts():
    u = ([0.6, 0.3, 0.6], [0.5, 0.2, 0.5], [0.7, 0.4, 0.7])
    assert shape_verdict(*u, 20) == "reproduced"
    assert shape_verdict(*u, 3) == "cannot tell at this power"
    loose = ([0.6, 0.5, 0.6], [0.4, 0.3, 0.4], [0.8, 0.7, 0.8])
    assert shape_verdict(*loose, 20) == "reproduced in direction (not significant)"
    rising = ([0.2, 0.6, 0.7], [0.1, 0.5, 0.6], [0.3, 0.7, 0.8])
    assert shape_verdict(*rising, 20) == "not reproduced"


def test_caliope_keeps_the_published_gaps_inside_the_trained_context():
    speed = {"max_position_embeddings": 8192, "mean_prompt_tokens": 750}
    spec, why = caliope_method({"documents": 5, "max_new_tokens": 24}, speed)
    assert spec == "caliope:calibrator=hourglass,delta_min=5,delta_max=1000" and "published" in why
    short = {"max_position_embeddings": 2048, "mean_prompt_tokens": 750}
    spec, why = caliope_method({"documents": 20, "max_new_tokens": 24}, short)
    assert "delta_max=" in spec and "×" in why
    factor = float(why.split("×")[1].split(",")[0])
    assert 0 < factor < 1


def test_bucket_bases_keep_the_default_ratios():
    assert bucket_bases(1e5) == "100000|175000|180000|190000|200000|225000"


def test_options_are_checked_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--quick", "--data", "no/such/file.jsonl.gz"])
    assert stop.value.code == 2
    assert (
        "--data 'no/such/file.jsonl.gz' not found; download qa_data/nq-open-oracle.jsonl.gz of the Lost in the Middle "
        "release (Liu et al., TACL 2024) from github.com/nelson-liu/lost-in-the-middle and pass it as --data"
    ) in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--quick", "--costly_questions", "9"])
    assert "take the first of --questions" in capsys.readouterr().err
    args = parse_args(["--quick", "--questions", "4"])
    assert args.size == dict(SIZES["quick"], questions=4) and args.data == str(NQ_OPEN_ORACLE)


def test_the_default_data_is_the_packaged_sample_where_it_is_enough(capsys):
    """Without --data: the 40-question sample for --quick and the default size (39 questions); a size it cannot
    hold is refused in one line naming the release file to download, before anything loads."""
    assert parse_args([]).data == str(NQ_OPEN_ORACLE)
    assert questions_needed(SIZES["full"]) <= count_questions(NQ_OPEN_ORACLE) == 40
    for argv, which in ((["--gpu"], "--gpu needs 199"), (["--questions", "18"], "these sizes need 42")):
        with pytest.raises(SystemExit) as stop:
            parse_args(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"{which} questions and the packaged sample has 40: download qa_data/nq-open-oracle.jsonl.gz" in err
        assert "github.com/nelson-liu/lost-in-the-middle and pass it as --data FILE" in err


def test_a_data_file_too_small_for_the_sizes_is_refused_before_anything_loads(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--gpu", "--data", str(NQ_OPEN_ORACLE)])
    assert "has 40 questions; the study needs 199" in capsys.readouterr().err


def test_gpu_without_cuda_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: --gpu is accepted")
    lines = gzip.decompress(NQ_OPEN_ORACLE.read_bytes()).splitlines(keepends=True)
    data = tmp_path / "nq-open-oracle.jsonl.gz"  # as many questions as --gpu needs (the sample's, repeated)
    data.write_bytes(gzip.compress(b"".join(lines * 5)))
    code = study_main(["--gpu", "--data", str(data), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--gpu needs a CUDA GPU, and torch" in err and "drop --gpu for the CPU study" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_quick_study_runs_end_to_end_and_resumes(real_model_dir, tmp_path, capsys):
    out = tmp_path / "study"
    study_main(["--quick", "--out", str(out), "--model", str(real_model_dir)])
    result = json.loads((out / "study.json").read_text())
    pi = [] if result["search"]["uniform_scale"] is not None else ["pi"]  # one scale everywhere: LPES is PI
    assert [row["key"] for row in result["main_rows"]] == [
        "baseline",
        "caliope",
        *pi,
        "ms_poe",
        "string",
        "lpes",
        "positional_hidden",
        "pcd",
    ]
    assert [row["key"] for row in result["costly_rows"]] == ["baseline", "fim", "attention_buckets"]
    size = result["size"]
    for row in result["main_rows"]:
        assert row["result"]["n"] == size["questions"] * size["documents"]
    assert len(result["bias"]["mean"]["gold"]) == size["documents"]
    assert set(result["claims"]) >= {
        "bias",
        "accuracy",
        "caliope",
        "fim",
        "pcd",
        "ms_poe",
        "string",
        "lpes",
        "positional_hidden",
    }
    assert len(result["search"]["scales"]) == 30  # one per layer of SmolLM2
    text = (out / "README.md").read_text()
    assert "## Each paper's claim next to what was seen" in text and (out / "study.png").is_file()
    commands = (out / "commands.sh").read_text()
    assert "--chat_template true" in commands and "search run" in commands
    before = (out / "eval" / "main" / "records.jsonl").stat().st_mtime_ns
    capsys.readouterr()
    study_main(["--quick", "--out", str(out), "--model", str(real_model_dir)])  # resumes: no rerun
    assert (out / "eval" / "main" / "records.jsonl").stat().st_mtime_ns == before
    assert "=== LPES search" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_quick_gold_loglik_study_leaves_pcd_out(real_model_dir, tmp_path):
    out = tmp_path / "study"
    study_main(["--quick", "--score", "gold_loglik", "--out", str(out), "--model", str(real_model_dir)])
    result = json.loads((out / "study.json").read_text())
    assert result["score"] == "gold_loglik"
    pi = [] if result["search"]["uniform_scale"] is not None else ["pi"]  # one scale everywhere: LPES is PI
    assert [row["key"] for row in result["main_rows"]] == [
        "baseline",
        "caliope",
        *pi,
        "ms_poe",
        "string",
        "lpes",
        "positional_hidden",
    ]
    assert all(row["result"]["accuracy"] < 0 for row in result["main_rows"] + result["costly_rows"])
    text = (out / "README.md").read_text()
    assert "gold log-likelihood (nats per token) [95% CI]" in text and "PCD is not in this table" in text
    assert "task.score" not in text and "score: gold_loglik" in (out / "configs" / "search.yaml").read_text()


CALIOPE = "caliope:calibrator=hourglass,delta_min=5,delta_max=1000"


def test_uniform_lpes_scales_run_and_list_one_method(tmp_path):
    """A search that gave every layer one scale (the quick study's: every fitness 0, scales at the start 1.5) is PI
    at that scale: PI is not run beside it, LPES's name says so, and its claim is not judged."""
    uniform, varied = [1.5] * 30, [1.2, 1.8] * 15
    assert "pi" not in main_methods(CALIOPE, uniform, tmp_path / "s.json", "metric")
    assert main_methods(CALIOPE, varied, tmp_path / "s.json", "metric")["pi"] == "pi:scale=1.5"
    assert lpes_name(uniform) == "LPES = PI at 1.500 (the search gave every layer that scale)"
    assert lpes_name(varied) == "LPES"


def _result(accuracy: float, vs: dict | None = None) -> dict:
    return {"n": 50, "n_examples": 10, "accuracy": accuracy, "accuracy_ci": [0.0, 0.1], "middle_accuracy": accuracy,
            "middle_accuracy_ci": [0.0, 0.1], "edges_accuracy": accuracy, "middle_minus_edges": 0.0,
            "middle_minus_edges_ci": [0.0, 0.0], "by_position": {str(p): {"accuracy": accuracy, "low": 0.0,
            "high": 0.1} for p in range(5)}, "vs_baseline": vs}  # fmt: skip


def test_the_report_of_a_search_that_never_left_its_start_lists_lpes_once(tmp_path):
    zero = {"mean_diff": 0.0, "low": 0.0, "high": 0.0, "p_value": 1.0, "p_holm": 1.0, "identical": True,
            "constant_score": 0.0, "verdict": "uninformative (every score 0)"}  # fmt: skip
    summary = {"results": {"mdqa": {"baseline": _result(0.0), "lpes:scale_file=s.json": _result(0.0, {**zero,
               "middle": zero})}}}  # fmt: skip
    rows = method_rows(summary, {"baseline": "baseline", "lpes": lpes_name([1.5] * 30)})
    bias = {"mean": {"gold": [{"value": 0.1, "ci": [0.0, 0.2], "position": p} for p in range(5)]}, "questions": 10}
    held = {"overall": 0.0, "per_subset": {"begin": 0.0, "middle": 0.0, "end": 0.0}}
    warning = "the searched scales score the same as the unscaled model on the 8 held-out questions: LPES 0.0000"
    study = {
        "size": {"documents": 5, "questions": 10, "costly_questions": 4, "population": 4, "generations": 1,
                 "search_questions": 6, "held_out": 8},
        "speed": {"prompts_per_second": 1.0, "mean_prompt_tokens": 400, "threads": 2},
        "main_rows": rows, "costly_rows": rows[:1], "score": "metric", "timings": {"search": 60.0},
        "search": {"scales": [1.5] * 30, "mean_scale": 1.5, "uniform_scale": 1.5, "outcome": {"warning": warning},
                   "held_out": {"baseline": held, "pi_mean": {"scale": 1.5, **held}, "lpes": held}},
        "bias": bias, "claims": claims(rows, rows[:1], bias, uniform=1.5),
    }  # fmt: skip
    text = report(tmp_path, study)
    assert text.count("| LPES = PI at 1.500 (the search gave every layer that scale) |") == 2  # table, held-out
    assert "PI at the LPES mean" not in text and "| PI (mean scale) |" not in text
    assert "PI at 1.500, so the two are one method, run and listed once (as LPES)" in text
    assert f"**The search's result is not a finding:** {warning}." in text
    assert "| uninformative (every score 0) |" in text and "| identical |" not in text
    assert study["claims"]["lpes"]["verdict"].startswith("cannot tell (the search gave every layer the scale 1.500")
