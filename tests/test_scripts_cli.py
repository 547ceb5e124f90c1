"""The scripts and the script-like `python -m workflows` commands take their options as every command does
(`repo_common.config_cli.parse_script`, `script_options`).

For each: `--print_config` prints the resolved defaults, the documented flags parse, a bad
value is one line with exit code 2, and `--config` of a printed config sets the same options. Only the
parsers run here, never a script's work (except the REPO analysis and the calibrator benchmark, on random
tiny models).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from script_loader import load_script
from transformers import LlamaConfig, LlamaForCausalLM
from workflow_commands import parse_args

from evaluation.methods import METHODS
from evaluation.model_loading import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.benchmarks import calibrators
from workflows.cli import COMMANDS
from workflows.cli import main as workflows_main


@dataclass(frozen=True)
class Case:
    script: str  # a file of scripts/, or a command of `python -m workflows`
    defaults: dict  # documented defaults, as --print_config prints them
    old_flags: list[str]  # the argparse spellings the README, docs and tests use
    parsed: dict  # what old_flags set
    bad: list[str]  # a mistake ...
    error: str  # ... and its one-line message
    required: list[str] = field(default_factory=list)  # options without a default

    def __str__(self) -> str:
        return self.script


CASES = [
    Case(
        "reproduce-position-bias",
        {"out": "outputs/position-bias", "seeds": 3, "steps": 400, "lr": 0.001, "distinct_keys": 8, "edge_share": 1.0},
        ["--edge_width", "2", "--eval_examples=7", "--seeds", "1"],
        {"edge_width": 2, "eval_examples": 7, "seeds": 1},
        ["--eval_positions", "99"],
        "--eval_positions must be in [3, --pairs]",
    ),
    Case(
        "reproduce-reversal",
        {"out": "outputs/reversal", "methods": ["nope", "rope", "repo"], "steps": 1500, "train_lengths": "2-20"},
        ["--methods", "rope,repo", "--examples_per_length", "7", "--test_lengths", "2-9"],
        {"methods": ["rope", "repo"], "examples_per_length": 7, "test_lengths": "2-9", "test_max": 9},
        ["--train_lengths", "2to20"],
        "--train_lengths must look like 2-20, got '2to20'",
    ),
    Case(
        "make_tiny_dip_base",
        {"work": "outputs/tiny-kv-dip-work", "seed": 0, "steps": 400, "eval_examples": 50, "threads": 1},
        ["--eval_examples", "3", "--seed", "2"],
        {"eval_examples": 3, "seed": 2},
        ["--threads", "0"],
        "--threads must be >= 1",
    ),
    Case(
        "make_tiny_repo_pair",
        {"work": "outputs/tiny-pair-work", "steps": 600, "curriculum_steps": 100, "eval_examples": 30, "threads": 1},
        ["--curriculum_steps", "50", "--eval_examples", "3"],
        {"curriculum_steps": 50, "eval_examples": 3},
        ["--curriculum_steps", "700"],
        "--curriculum_steps must be in [0, --steps=600]",
    ),
    Case(
        "pretrain_tiny_base",
        {
            "out": "workflows/assets/tiny-kv-base",
            "steps": 2500,
            "keys": 8,
            "pairs": 24,
            "eval_every": 250,
            "threads": 0,
        },
        ["--eval_every", "5", "--keys", "4"],
        {"eval_every": 5, "keys": 4},
        ["--batch", "0"],
        "option --batch: expected a positive integer, got 0",
    ),
    Case(
        "analyze_repo_positions",
        {"model": "m", "task": "kv", "task_param": [], "num_examples": 8, "seed": 0, "out": "o"},
        ["--task_param", "num_keys=4", "--task_param=key_chars=1", "--num_examples", "3"],
        {"task_param": ["num_keys=4", "key_chars=1"], "num_examples": 3},
        ["--task_param", "num_keys"],
        "--task_param expects KEY=VALUE, got 'num_keys'",
        required=["--model", "m", "--out", "o"],
    ),
    Case(
        "benchmark-calibrators",
        {
            "prompts": 8,
            "docs": 10,
            "doc_words": 12,
            "short_doc_words": 3,
            "new_tokens": 16,
            "batch_size": 4,
            "rounds": 5,
        },
        ["--methods", "pcd", "--methods", "pi:scale=2", "--doc_words", "5", "--batch_size", "2"],
        {"methods": ["pcd", "pi:scale=2"], "doc_words": 5, "batch_size": 2},
        ["--methods", "[pcd, nope]"],
        "unknown method 'nope'; registered methods are",
    ),
    Case(
        "benchmark-fim",
        {"docs": 4, "examples": 2, "new_tokens": 8, "hidden": 256, "rounds": 2},
        ["--new_tokens", "3", "--docs", "2"],
        {"new_tokens": 3, "docs": 2},
        ["--docs", "0"],
        "option --docs: expected a positive integer, got 0",
    ),
    Case(
        "benchmark-harness",
        {"family": "olmo2", "prompts": 16, "min_chars": 200, "max_chars": 800, "new_tokens": 32, "rounds": 5},
        ["--min_chars", "100", "--new_tokens", "4", "--family", "repo_olmo2"],
        {"min_chars": 100, "new_tokens": 4, "family": "repo_olmo2"},
        ["--min_chars", "900"],
        "--min_chars 900 is above --max_chars 800",
    ),
    Case(
        "benchmark-training",
        {"rounds": 3, "steps": 8, "seq_len": 1024, "batch": 2, "skip_ddp": False},
        ["--seq_len", "64", "--skip_ddp", "true"],
        {"seq_len": 64, "skip_ddp": True},
        ["--rounds", "x"],
        "option --rounds: expected a positive integer, got 'x'",
    ),
    Case(
        "benchmark-repo-overhead",
        {"seq_len": 1024, "batch": 2, "hidden": 256, "heads": 4, "layers": 6, "rounds": 10, "clock": "wall"},
        ["--seq_len", "4096", "--heads", "8", "--clock", "cpu"],
        {"seq_len": 4096, "heads": 8, "clock": "cpu"},
        ["--clock", "sundial"],
        "option --clock: expected one of ['cpu', 'wall'], got 'sundial'",
    ),
    Case(
        "benchmark-search",
        {"questions": 40, "held_out": 40, "population": 8, "generations": 4, "seeds": [0], "min_questions": 8},
        ["--held_out", "8", "--min_questions", "2", "--fractions", "[0.5, 1.0]"],
        {"held_out": 8, "min_questions": 2, "fractions": [0.5, 1.0]},
        ["--fractions", "[0.5, 0.9]"],
        "ga.racing.fractions must lie in (0, 1] and end with 1.0 (the whole set), got [0.5, 0.9]",
    ),
    Case(
        "crosscheck-lm-eval",
        {"model": "models/smollm2-135m-instruct", "num_documents": 5, "gold_positions": "all", "repeats": 3},
        ["--num_documents", "3", "--gold_positions", "0,2", "--chat_template", "true", "--max_new_tokens", "16"],
        {"num_documents": 3, "gold_positions": [0, 2], "chat_template": True, "max_new_tokens": 16},
        ["--system_prompt", "Answer briefly."],
        "--system_prompt needs --chat_template true",
    ),
]
MODULES = {case.script: load_script(case.script) for case in CASES if case.script not in COMMANDS}
CASE = {case.script: case for case in CASES}


def _parse(case: Case, argv: list[str]):
    """The checked options of the script or command for `argv`."""
    if case.script in COMMANDS:
        return parse_args(case.script, argv)
    return MODULES[case.script].parse_args(argv)


def _prog(case: Case) -> str:
    return f"python -m workflows {case.script}" if case.script in COMMANDS else MODULES[case.script].PROG


def _printed(case: Case, argv: list[str], capsys) -> str:
    """What `--print_config` prints for `argv` (it exits 0)."""
    with pytest.raises(SystemExit) as stop:
        _parse(case, [*argv, "--print_config"])
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("case", CASES, ids=str)
def test_print_config_prints_the_resolved_defaults(case, capsys):
    printed = yaml.safe_load(_printed(case, case.required, capsys))
    assert {key: printed[key] for key in case.defaults} == case.defaults
    options = vars(_parse(case, case.required))
    assert "config" not in printed and printed == {key: options[key] for key in printed}  # what the run uses


@pytest.mark.parametrize("case", CASES, ids=str)
def test_old_flags_still_parse(case):
    options = vars(_parse(case, [*case.required, *case.old_flags]))
    assert {key: options[key] for key in case.parsed} == case.parsed


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_bad_value_is_one_line_and_exit_code_2(case, capsys):
    with pytest.raises(SystemExit) as stop:
        _parse(case, [*case.required, *case.bad])
    err, prog = capsys.readouterr().err, _prog(case)
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"{prog}: error: {case.error}") and err.endswith(f"(see {prog} --help)\n")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_config_of_a_printed_config_sets_the_same_options(case, tmp_path, capsys):
    text = _printed(case, [*case.required, *case.old_flags], capsys)
    config = tmp_path / "config.yaml"
    config.write_text(text)
    assert _printed(case, ["--config", str(config)], capsys) == text
    assert vars(_parse(case, ["--config", str(config)])) == vars(_parse(case, [*case.required, *case.old_flags]))


def test_options_beat_a_config_file_and_hidden_or_derived_values_are_not_printed(tmp_path, capsys):
    config = tmp_path / "reversal.yaml"
    config.write_text("methods: [repo]\nsteps: 7\n")
    options = parse_args("reproduce-reversal", ["--steps", "9", "--config", str(config)])
    assert options.methods == ["repo"] and options.steps == 9 and options.train_max == 20
    printed = yaml.safe_load(_printed(CASE["reproduce-reversal"], ["--config", str(config)], capsys))
    assert printed["steps"] == 7 and "train_max" not in printed  # derived by the check, not an option


@pytest.mark.slow  # the analysis script twice (~3 s): the fast suite stays under 5 min
def test_the_repo_analysis_stores_its_config_and_the_file_replays_it(tmp_path):
    torch.manual_seed(0)
    tokenizer = byte_tokenizer()
    model = tmp_path / "repo"
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, position_method="repo")
    RePoOlmo2ForCausalLM(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    analysis = MODULES["analyze_repo_positions"]
    argv = ["--model", str(model), "--task_param", "num_keys=3", "--num_examples", "1", "--out", str(tmp_path / "out")]
    analysis.main(argv)
    stored = Path(tmp_path / "out" / "config.yaml")
    assert vars(analysis.parse_args(["--config", str(stored)])) == vars(analysis.parse_args(argv))


#: The project's own methods (other tests register more in `METHODS`).
BUILT_IN_METHODS = {name for name, cls in METHODS.items() if cls.__module__.startswith("evaluation.")}


def test_the_calibrator_benchmark_table_checks_each_target_at_every_length():
    cell = calibrators.Cell
    results = {
        "pcd": [cell([1.4, 1.5, 1.6], [1.9, 2.0, 2.1], 1.3), cell([1.45, 1.2, 1.49], [2.0, 2.0, 2.0], None)],
        "attention_buckets:bases=10000|500": [cell([2.0], [2.0], 1.0), cell([2.0], [2.0], 1.0)],
        calibrators.AMORTISED_FIM: [cell([1.0], [1.2, 1.25, 1.4], 1.0), cell([1.0], [1.31, 1.35, 1.4], 1.0)],
    }
    lines = calibrators.table(results, ["400 tok", "1000 tok"])
    assert lines[0].startswith("| method | paper's cost | decode × (400 tok) | decode × (1000 tok) |")
    pcd, buckets, fim = lines[2:]
    # medians 1.5 and 1.45: within 1.5 at both lengths; the range is printed beside the median
    assert "| 1.50 (1.40–1.60) | 1.45 (1.20–1.49) |" in pcd and pcd.endswith("| 1.30 | n/a | ≤ 1.5× decode: met |")
    assert buckets.startswith("| attention_buckets:bases=10000\\|500 | 4.8× (LPES, Table 4) |")  # '|' escaped
    assert buckets.endswith("| – |")  # not the default six bases: no target
    assert fim.startswith("| fim:calibration=amortised,bias_file=FILE | n/a (ours) |")
    assert fim.endswith("≤ 1.3× total: missed |")  # 1.25 at the short length, 1.35 at the long one
    buckets_target, pcd_target, fim_target = calibrators.target_lines(results, ["400 tok", "1000 tok"])
    assert (
        pcd_target
        == "target PCD: decode ≤ 1.5× the baseline: 1.50 (1.40–1.60) at 400 tok, 1.45 (1.20–1.49) at 1000 tok: met"
    )
    assert buckets_target.endswith("decode ≤ 3× the baseline: not run")  # only the default six bases are targeted
    assert fim_target.endswith("1.35 (1.31–1.40) at 1000 tok: missed")
    assert (
        calibrators.coverage_line(results, BUILT_IN_METHODS)
        == "registered methods not in this run: caliope, lpes, ms_poe, pi, positional_hidden, string"
    )


@pytest.mark.slow  # every method generates (~4 s)
def test_the_quick_calibrator_benchmark_times_every_registered_method(capsys):
    threads = torch.get_num_threads()
    try:
        assert workflows_main(["benchmark-calibrators", "--quick", "true", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)  # main sets the process's torch threads
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| method ")]
    assert BUILT_IN_METHODS - {"baseline"} <= {row[2:].split(" |")[0].split(":")[0] for row in rows}
    for row in rows:  # four timed cells with a median and a range; no memory runs in the quick mode
        cells = row.split(" | ")
        assert all(re.fullmatch(r"\d+\.\d\d \(\d+\.\d\d–\d+\.\d\d\)", cell) for cell in cells[2:6]), row
        assert cells[6:8] == ["n/a", "n/a"], row
    targets = [line for line in out.splitlines() if line.startswith("target ")]
    assert [line.split(":")[0] for line in targets] == [f"target {t.name}" for t in calibrators.TARGETS.values()]
    assert all(line.endswith((": met", ": missed")) for line in targets)
    (coverage,) = [line for line in out.splitlines() if "registered method" in line]
    left_out = coverage.split("not in this run: ")[1].split(", ") if "not in this run" in coverage else []
    assert not set(left_out) & BUILT_IN_METHODS, coverage  # only methods other tests registered


def test_the_calibrator_benchmark_refuses_a_model_directory_it_cannot_time_in_one_line(tmp_path, capsys):
    for model, error in [
        (tmp_path / "absent", "--model '"),
        (tmp_path, f"--model {tmp_path} has no config.json; pass the folder save_pretrained wrote"),
    ]:
        assert workflows_main(["benchmark-calibrators", "--quick", "true", "--model", str(model)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and error in err, err


@pytest.mark.slow  # three methods generate (~2.5 s)
def test_the_calibrator_benchmark_times_a_saved_model_with_its_own_layer_count(tmp_path, capsys):
    """`--model DIR` times that model (here a GQA Llama of 3 layers, not the random OLMo-2 of `--layers`): the
    LPES scale file it writes has the model's layer count, and the summary names the directory and its shape."""
    model = tmp_path / "llama"
    fields = dict(
        vocab_size=len(byte_tokenizer()), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    LlamaForCausalLM(LlamaConfig(**fields)).save_pretrained(model)
    byte_tokenizer().save_pretrained(model)
    threads = torch.get_num_threads()
    methods = ["pcd", "attention_buckets", calibrators.LPES]
    try:
        argv = ["--quick", "true", "--threads", "1", "--layers", "7", "--model", str(model)]
        argv += [word for spec in methods for word in ("--methods", spec)]  # one spec per --methods
        assert workflows_main(["benchmark-calibrators", *argv]) == 0
    finally:
        torch.set_num_threads(threads)  # main sets the process's torch threads
    out = capsys.readouterr().out
    assert f"{model} (d=32, 3 layers, 4 heads, 2 KV heads);" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| method ")]
    assert [row[2:].split(" |")[0] for row in rows] == ["pcd", "attention_buckets", "lpes:scale_file=FILE"]
