"""Start-up: `--help` and the refusals that need no model load no ML package (issue 24, "Start-up").

Each command runs in a fresh interpreter (`startup_probe.py`), which reports the heavy packages in
`sys.modules` when the command has answered: deterministic, unlike a timing (the timings are
`python -m workflows benchmark-startup`'s). `fit` / `validate` are the exception: LightningCLI's parser is built from
the LightningModule, so their `--help`, `--print_config` and refusals load torch and Lightning first (the slow
test at the end), but for a missing `--ckpt_path` or `model.init_from` (refused before); their other model-free
refusals come before the model is built or any data is read (tests/test_bad_inputs_training.py). (`python -m evaluation run` was an exception until its parser and
resolution read the task and method classes without torch or `datasets`.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("startup_probe.py")
#: What `--help` must not load: each costs seconds of start-up on two cores.
HEAVY = ("torch", "transformers", "pytorch_lightning", "lightning", "deepspeed", "matplotlib", "datasets")

#: (command, one refusal of it that needs no model: its arguments, a phrase of its one line)
COMMANDS = {
    "python -m repo_train": ([], None),
    "python -m repo_train demo": (["--steps", "0"], "--steps"),
    "python -m repo_train export": (["--out", "x"], "missing option --checkpoint"),
    "python -m repo_train real-model": (["--dtype", "int3"], "--dtype"),
    "python -m repo_train check-gpu": None,  # moved: the refusal alone (below)
    "python -m evaluation": (["nope"], "unknown command 'nope'"),
    "python -m evaluation run": (["--out", "x", "--methods", "pi:scale=2", "--tasks", "nope"], "unknown task(s)"),
    "python -m evaluation report": ([], "missing option --out"),
    "python -m evaluation summarize": (["--out", "r", "--colour"], "--colour"),
    "python -m evaluation calibrate-fim": (["--model", "m", "--method", "pi", "--out", "b.json"], "give a fim spec"),
    "python -m search": (["nope"], "unknown command 'nope'"),
    "python -m search run": (["--ga.population", "many"], "--ga.population"),
    "python -m search show": ([], "scale_file"),
    "python -m search diagnose": (["--out", "d"], "missing option --scale_file"),
    "python -m search positional-dims": (
        ["--model", "no-model", "--valid_set", "v.jsonl", "--out", "o.json"],
        "no such directory",
    ),
    "python -m workflows": (["nope"], "unknown command 'nope'"),
    "python -m workflows check-gpu": (["--train_processes", "0"], "--train_processes"),
    "python -m workflows benchmark-startup": (["--rounds", "0"], "--rounds"),
    "python -m workflows benchmark-fit": (["--steps", "0"], "--steps"),
    "python -m workflows device-kit": (["--call_mib", "0"], "--call_mib"),
    # the benchmarks import their measuring module (torch) only after their model-free checks
    "python -m workflows benchmark-calibrators": (["--methods", "nope"], "unknown method 'nope'"),
    "python -m workflows benchmark-fim": (["--docs", "0"], "--docs"),
    "python -m workflows benchmark-harness": (["--min_chars", "900"], "is above --max_chars 800"),
    "python -m workflows benchmark-repo-overhead": (["--clock", "sun"], "--clock"),
    "python -m workflows benchmark-search": (["--population", "3"], "leaves no mutation children"),
    "python -m workflows benchmark-training": (["--steps", "0"], "--steps"),
    "python -m workflows study-real-model": (["--questions", "0"], "--questions must be >= 1"),
    "python -m workflows crosscheck-lm-eval": (["--gold_positions", "nowhere"], "--gold_positions expects"),
    "python -m workflows reproduce-reversal": (["--methods", "alibi"], "--methods: unknown ['alibi']"),
    "python -m workflows quickstart": (["--steps", "none"], "--steps"),
    "python -m workflows reproduce-position-bias": (["--eval_examples", "0"], "--eval_examples must be"),
    "scripts/make_tiny_dip_base.py": (["--seed", "x"], "--seed"),
    "scripts/make_tiny_repo_pair.py": (["--steps", "x"], "--steps"),
    "scripts/check_gpu.py": (["--pairs", "0"], "--pairs"),
    # the scripts that import torch only after parsing (their model-free checks included)
    "scripts/analyze_repo_positions.py": (["--model", "m", "--out", "o", "--task_param", "x"], "expects KEY=VALUE"),
    "scripts/compare_fim_calibrations.py": (
        ["--model", "m", "--task", "mdqa", "--task_params", '{"max_new_tokens": 24}', "--out", "c"],
        "unknown parameter(s) ['max_new_tokens']",
    ),
    "scripts/pretrain_tiny_base.py": (["--keys", "20"], "at most 16 distinct keys"),
}


def probe(command: str, args: list[str]) -> tuple[int, str, list[str]]:
    """(exit code, stderr, heavy packages loaded) of `command args` in a fresh interpreter."""
    words = command.split()
    target = ["-m", words[2], *words[3:]] if words[:2] == ["python", "-m"] else [str(ROOT / words[0])]
    result = subprocess.run(
        [sys.executable, str(PROBE), ",".join(HEAVY), *target, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    report = result.stdout.strip().splitlines()[-1]  # the probe's last line: its JSON report
    loaded = json.loads(report)
    return loaded["code"], result.stderr, loaded["heavy"]


@pytest.mark.parametrize("command", [c for c, case in COMMANDS.items() if case is not None])
def test_help_loads_no_heavy_package(command):
    code, err, heavy = probe(command, ["--help"])
    assert code == 0, err
    assert heavy == [], f"{command} --help imported {heavy}"


@pytest.mark.parametrize("command", [c for c, case in COMMANDS.items() if case and case[1]])
def test_a_refusal_that_needs_no_model_loads_no_heavy_package(command):
    args, phrase = COMMANDS[command]
    code, err, heavy = probe(command, args)
    assert code == 2 and phrase in err and len(err.strip().splitlines()) == 1, err
    assert heavy == [], f"{command} {' '.join(args)} imported {heavy} before refusing"


@pytest.mark.parametrize(
    "args",
    [
        ["--print_config"],  # the template: the default task and method resolved without their heavy packages
        ["--out", "x", "--methods", "nope"],  # an unknown method name: the registry's names alone
        ["--out", "x", "--batch_size", "0"],
        ["--out", "x", "--dtype", "bfloat16"],  # a dtype the tiny default would ignore
        ["--out", "{folder}"],  # a folder of other files
    ],
)
def test_evaluation_run_checks_its_config_before_loading_the_harness(args, tmp_path):
    (tmp_path / "notes.txt").write_text("the user's own")
    args = [arg.format(folder=tmp_path) for arg in args]
    code, err, heavy = probe("python -m evaluation run", args)
    assert code == (0 if args == ["--print_config"] else 2), err
    assert heavy == [], f"evaluation run {' '.join(args)} imported {heavy}"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and not (ROOT / "x").exists()


#: A model directory with its config.json but no tokenizer files: refused from its file list alone.
_NO_TOKENIZER = "{tmp}/no-tokenizer"
_MODEL = "workflows/assets/tiny-kv-dip"


@pytest.mark.parametrize(
    ("command", "args", "phrase"),
    [
        (
            "python -m evaluation run",
            ["--model", _NO_TOKENIZER, "--tasks", "kv", "--num_examples", "2"],
            "has no tokenizer",
        ),
        ("python -m evaluation run", ["--model", "models/no-such-model"], "'models/no-such-model': no such directory"),
        (
            "python -m evaluation run",
            ["--model", _MODEL, "--data_dir", "{tmp}/nowhere"],
            "is not a directory; download",
        ),
        (
            "python -m evaluation run",
            ["--model", _MODEL, "--tasks", "mdqa", "--data_dir", "{tmp}"],
            "no nq-open-oracle",
        ),
        ("python -m search run", ["--model.path", _NO_TOKENIZER], "has no tokenizer"),
        (
            "python -m search run",
            ["--model.path", _MODEL, "--task.name", "mdqa", "--task.data_dir", "{tmp}/nowhere"],
            "download",
        ),
        (
            "python -m search run",
            ["--model.path", _MODEL, "--task.name", "mdqa", "--task.data_dir", "{tmp}"],
            "no nq-open-oracle",
        ),
        ("python -m repo_train fit", ["--ckpt_path", "{tmp}/gone.ckpt"], "gone.ckpt' does not exist"),
        ("python -m repo_train validate", ["--ckpt_path={tmp}/gone.ckpt"], "gone.ckpt' does not exist"),
        ("python -m repo_train fit", ["--config", "{tmp}/resume.yaml"], "gone.ckpt' does not exist"),
        ("python -m repo_train fit", ["--model.init_from", "models/no-such-model"], "no such directory"),
        ("python -m workflows study-real-model", ["--gpu"], "--gpu needs 199 questions"),
        ("python -m workflows study-real-model", ["--data", "{tmp}/nq.jsonl.gz"], "download qa_data/nq-open-oracle"),
        ("python -m workflows crosscheck-lm-eval", ["--model", _NO_TOKENIZER], "has no tokenizer"),
    ],
)
def test_a_missing_file_is_refused_before_torch_loads(command, args, phrase, tmp_path):
    """A model directory without its files, a data folder or file, a checkpoint that is not there: judged from the
    file system alone, in a second. (A method spec's parameters are not among these: a built-in method's
    parameters, their types and checks are its class, defined beside its torch code, so `pi:scale=fast` or
    `lpes:scale_file=gone.json` are refused once that module, and torch, are loaded.)"""
    (tmp_path / "no-tokenizer").mkdir()
    (tmp_path / "no-tokenizer" / "config.json").write_text((ROOT / _MODEL / "config.json").read_text())
    (tmp_path / "resume.yaml").write_text(f"ckpt_path: {tmp_path / 'gone.ckpt'}\n")
    outputs = {"python -m search run": ["--out", f"{tmp_path}/s/s.json"], "python -m repo_train fit": [],
               "python -m repo_train validate": [], "python -m workflows crosscheck-lm-eval": ["--out", f"{tmp_path}/c.json"]}  # fmt: skip
    out = outputs.get(command, ["--out", f"{tmp_path}/out"])
    code, err, heavy = probe(command, [*[arg.format(tmp=tmp_path) for arg in args], *out])
    assert code == 2 and phrase in err and len(err.strip().splitlines()) == 1, err
    assert heavy == [], f"{command} {' '.join(args)} imported {heavy} before refusing"


def test_search_run_prints_its_config_template_without_loading_the_model_classes():
    code, err, heavy = probe("python -m search run", ["--print_config"])
    assert code == 0 and heavy == [], f"search run --print_config imported {heavy}: {err}"


def test_the_moved_check_gpu_spelling_is_refused_without_loading_anything():
    code, err, heavy = probe("python -m repo_train", ["check-gpu"])
    assert code == 2 and "python -m workflows check-gpu" in err and heavy == []


@pytest.mark.slow  # each loads torch (fit: Lightning too): 13-18 s on two cores at load 2-3
@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ("python -m repo_train fit", ["--help"], {"torch", "pytorch_lightning"}),
        ("python -m repo_train validate", ["--print_config"], {"torch", "pytorch_lightning"}),
    ],
)
def test_the_known_exceptions_still_need_their_packages_for_help(command, args, expected):
    """If one of these stops importing them, move it to COMMANDS above (the README's table says why it is slow)."""
    code, err, heavy = probe(command, args)
    assert code == 0, err
    assert expected <= set(heavy)


@pytest.mark.slow  # each loads torch: 5-15 s on two cores
@pytest.mark.parametrize("spec", ["pi:scale=fast", "lpes:scale_file=gone.json"])
def test_a_built_in_method_s_parameters_are_judged_with_its_module(spec, tmp_path):
    """The known exception: a built-in method's parameters, their types and checks are its class, in a module
    that imports torch (the registry names it by its class path), so such a refusal loads torch; everything the
    run judges without a model comes before it. If this stops importing torch, add it to the list above."""
    args = ["--model", _MODEL, "--tasks", "kv", "--num_examples", "2", "--methods", spec, "--out", f"{tmp_path}/o"]
    code, err, heavy = probe("python -m evaluation run", args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and spec.split(":")[0] in err, err
    assert "torch" in heavy


@pytest.mark.slow  # loads torch and Lightning: 13-18 s on two cores at load 2-3
def test_a_fit_refusal_comes_from_lightning_cli_in_one_line():
    """LightningCLI's own refusal, as a user types it: one line, exit code 2 (tests/test_fit_settings_checks.py
    checks in process that such refusals come before the model is built)."""
    code, err, _heavy = probe("python -m repo_train fit", ["--trainer.max_steps", "abc"])
    assert code == 2 and "--trainer.max_steps: 'abc' is not valid (expected int)" in err, err
    assert len(err.strip().splitlines()) == 1, err
