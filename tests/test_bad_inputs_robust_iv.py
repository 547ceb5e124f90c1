"""Bad inputs of the fourth robustness probe (issue 53): the loop's dry run, runs that would do nothing or less
than asked, the lm-eval backend's arguments, interrupted and damaged runs.

Each row is a command line run in this process (`check_row`): its exit code, a phrase of the one stderr
line, and every file under the row's directory byte-identical afterwards. What is not a refusal (a report
of one question, a resume with fewer methods) has a test of its own below the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from bad_input_helpers import (
    EVAL,
    HUB_ID,
    BadInput,
    Context,
    check_row,
    full_disk_on,
    repo_model,
    row_params,
    tree_bytes,
)

from repo_common import atomic
from repo_common.cli_errors import EXIT_USAGE
from repo_train.data import SyntheticData
from workflows.cli import main as workflows_main

ROOT = Path(__file__).resolve().parents[1]
FULL_SCALE = str(ROOT / "configs" / "quickstart" / "olmo2-1b.yaml")


def _quickstart_dry_run(*files: tuple[str, str]) -> Callable[[Context], list[str]]:
    """The full-scale loop's dry run into ctx.tmp/mine, which holds `files` (name, text) first."""

    def make(ctx: Context) -> list[str]:
        out = ctx.tmp / "mine"
        out.mkdir()
        for name, text in files:
            (out / name).write_text(text)
        return ["quickstart", "--config", FULL_SCALE, "--dry_run", "--out", str(out)]

    return make


def _evaluate(*args: str) -> Callable[[Context], list[str]]:
    """`evaluation run` of the tiny model into ctx.tmp/out with `args` added."""
    return lambda ctx: [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out"), *args]


#: What `fit` saved with the checkpoint a resume row reads: the tiny preset on synthetic data.
SAVED_MODEL = {"init_from": None, "preset_name": "tiny", "position_method": "repo", "lr": 0.01}
SAVED_DATA = {"train": SyntheticData(seq_len=32).to_config(), "global_batch_size": 16, "micro_batch_size": 4}


def _resume_at(step: int, *args: str) -> Callable[[Context], list[str]]:
    """`fit --ckpt_path` of a checkpoint saved at `step` (no weights: the refusal comes before they are read)."""

    def make(ctx: Context) -> list[str]:
        state = {"state_dict": {}, "global_step": step, "hyper_parameters": SAVED_MODEL}
        state["datamodule_hyper_parameters"] = SAVED_DATA
        torch.save(state, ctx.tmp / "run.ckpt")
        root = ["--trainer.default_root_dir", str(ctx.tmp / "run")]
        return ["fit", *root, "--ckpt_path", str(ctx.tmp / "run.ckpt"), *args]

    return make


def _lm_eval(*args: str, model: Callable[[Context], str] | None = None) -> Callable[[Context], list[str]]:
    """`evaluation lm-eval run --model repo-train ...`; `{model}` in an argument stands for the tiny model's
    directory (built only when named), `{tmp}` for the row's directory."""

    def make(ctx: Context) -> list[str]:
        directory = str(repo_model(ctx.tmp)) if any("{model}" in arg for arg in args) else ""
        filled = [arg.replace("{model}", directory).replace("{tmp}", str(ctx.tmp)) for arg in args]
        return ["lm-eval", "run", "--model", "repo-train", "--tasks", "arc_easy", *filled]

    return make


def _method_named(name: str) -> str:
    """A user's module registering an evaluation method called `name`."""
    return (
        "from dataclasses import dataclass\nfrom typing import ClassVar\n"
        "from evaluation.methods import Method, register_method\n\n\n"
        f"@register_method\n@dataclass\nclass Mine(Method):\n    name: ClassVar[str] = {name!r}\n"
    )


def _importing(cli: str, source: str, *args: str) -> Callable[[Context], list[str]]:
    """`evaluation run` (cli "evaluation") or `fit` (cli "repo_train") with `--import` of ctx.tmp/mine.py."""

    def make(ctx: Context) -> list[str]:
        (ctx.tmp / "mine.py").write_text(source)
        if cli == "evaluation":
            return [*EVAL, "--import", str(ctx.tmp / "mine.py"), "--out", str(ctx.tmp / "out"), *args]
        root = ["--trainer.default_root_dir", str(ctx.tmp / "run")]
        return ["fit", "--import", str(ctx.tmp / "mine.py"), "--trainer.max_steps", "1", *root, *args]

    return make


def _preset(signature: str) -> str:
    return (
        "from repo_train.modeling.presets import register_preset, tiny\n\n\n"
        f"@register_preset('mine')\ndef mine({signature}):\n    return tiny()\n"
    )


def _beside_damaged_last(damage: Callable[[bytes], bytes]) -> Callable[[Context], list[str]]:
    """`fit` into a root whose interrupted run's last.ckpt was then damaged (`damage` of its bytes)."""

    def make(ctx: Context) -> list[str]:
        last = ctx.tmp / "run" / "checkpoints" / "last.ckpt"
        last.parent.mkdir(parents=True)
        state = {"state_dict": {"w": torch.zeros(256)}, "global_step": 124, "repo_train_interrupted": {"step": 124}}
        torch.save(state, last)
        last.write_bytes(damage(last.read_bytes()))
        return ["fit", "--trainer.max_steps", "600", "--trainer.default_root_dir", str(ctx.tmp / "run")]

    return make


def _mixed_tasks(spec: str) -> Callable[[Context], list[str]]:
    """kv (generation) then multiple_choice (log-likelihood) with `--methods spec`, on the tiny default."""

    def make(ctx: Context) -> list[str]:
        line = {"question": "q", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "A"}
        (ctx.tmp / "mc.jsonl").write_text((json.dumps(line) + "\n") * 2)
        tasks = ["--tasks", "kv,multiple_choice", "--task_param", f"multiple_choice:path={ctx.tmp / 'mc.jsonl'}"]
        return [*EVAL, *tasks, "--methods", "baseline", "--methods", spec, "--out", str(ctx.tmp / "out")]

    return make


def _fit_config(text: str) -> Callable[[Context], list[str]]:
    """`fit --config FILE` of a file holding `text`."""

    def make(ctx: Context) -> list[str]:
        (ctx.tmp / "fit.yaml").write_text(text)
        return ["fit", "--config", str(ctx.tmp / "fit.yaml"), "--trainer.default_root_dir", str(ctx.tmp / "run")]

    return make


def _config_only(ctx: Context) -> str:
    """A model directory with config.json and weights but no tokenizer files."""
    from bad_input_helpers import config_only

    return str(config_only(ctx.tmp, "no_tokenizer", model_type="olmo2"))


def _empty_dir(ctx: Context) -> str:
    (ctx.tmp / "empty").mkdir()
    return str(ctx.tmp / "empty")


ROWS = [
    # -- the loop's dry run: a user's folder is refused like any other command's
    BadInput(
        "qs-dry-run-user-commands-sh",
        "workflows",
        _quickstart_dry_run(("commands.sh", "echo mine\n"), ("notes.txt", "my notes\n")),
        EXIT_USAGE,
        "--out",
    ),
    BadInput(
        "qs-dry-run-user-script-with-shebang",
        "workflows",
        _quickstart_dry_run(("commands.sh", "#!/usr/bin/env bash\n# my own steps\nls\n")),
        EXIT_USAGE,
        "--out",
    ),
    BadInput(
        "qs-dry-run-user-commands-sh-alone", "workflows", _quickstart_dry_run(("commands.sh", "")), EXIT_USAGE, "--out"
    ),
    BadInput(
        "qs-dry-run-binary-commands-sh",
        "workflows",
        _quickstart_dry_run(("commands.sh", "\udcff"[:0] + "\x00\x01binary")),
        EXIT_USAGE,
        "--out",
    ),
    # -- an empty method list: refused before the model loads
    BadInput(
        "eval-methods-empty-list", "evaluation", _evaluate("--methods", "[]"), EXIT_USAGE, "--methods is an empty list"
    ),
    # -- a resume that would train nothing
    BadInput(
        "fit-resume-max-steps-below-step",
        "repo_train",
        _resume_at(124, "--trainer.max_steps", "3"),
        EXIT_USAGE,
        "--trainer.max_steps 3 is below the step of the checkpoint it resumes (124",
    ),
    BadInput(
        "fit-resume-max-steps-one-below",
        "repo_train",
        _resume_at(124, "--trainer.max_steps", "123"),
        EXIT_USAGE,
        "(124",
    ),
    # -- PCD's ratio: B' = ratio * B must not exceed B
    BadInput(
        "pcd-ratio-above-one",
        "evaluation",
        _evaluate("--methods", "pcd:ratio=1.5"),
        EXIT_USAGE,
        "pcd: ratio (B'/B) must be in (0, 1], got 1.5",
    ),
    BadInput("pcd-ratio-two", "evaluation", _evaluate("--methods", "pcd:ratio=2"), EXIT_USAGE, "under-rotates"),
    BadInput("pcd-ratio-inf", "evaluation", _evaluate("--methods", "pcd:ratio=inf"), EXIT_USAGE, "(0, 1]"),
    BadInput("pcd-ratio-nan", "evaluation", _evaluate("--methods", "pcd:ratio=nan"), EXIT_USAGE, "(0, 1]"),
    BadInput("pcd-ratio-zero", "evaluation", _evaluate("--methods", "pcd:ratio=0"), EXIT_USAGE, "(0, 1]"),
    BadInput("pcd-ratio-negative", "evaluation", _evaluate("--methods", "pcd:ratio=-1e-4"), EXIT_USAGE, "(0, 1]"),
    BadInput(
        "pcd-ratio-in-a-stack",
        "evaluation",
        _evaluate("--methods", "pi:scale=2+pcd:ratio=1.01"),
        EXIT_USAGE,
        "got 1.01",
    ),
    # -- lm-eval's model_args read strictly
    BadInput(
        "lm-eval-repeated-key",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},method=pi:scale=2,method=baseline"),
        EXIT_USAGE,
        "--model_args: method is given twice",
    ),
    BadInput(
        "lm-eval-repeated-key-two-values",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "pretrained={tmp}/other"),
        EXIT_USAGE,
        "pretrained is given twice",
    ),
    BadInput(
        "lm-eval-repeated-key-two-options",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},method=pi:scale=2", "--model_args", "method=baseline"),
        EXIT_USAGE,
        "method is given twice",
    ),
    BadInput(
        "lm-eval-padded-key",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}, method = pi:scale=2"),
        EXIT_USAGE,
        "key ' method ' has spaces around it",
    ),
    BadInput(
        "lm-eval-padded-key-equals-form",
        "evaluation",
        _lm_eval("--model_args=pretrained={model},method =pi"),
        EXIT_USAGE,
        "key 'method ' has spaces",
    ),
    BadInput(
        "lm-eval-gen-kwargs-repeated",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "--gen_kwargs", "max_gen_toks=4,max_gen_toks=8"),
        EXIT_USAGE,
        "--gen_kwargs: max_gen_toks is given twice",
    ),
    # -- lm-eval's pretrained= judged as `evaluation run --model`
    BadInput(
        "lm-eval-pretrained-missing-dir",
        "evaluation",
        _lm_eval("--model_args", "pretrained={tmp}/nowhere"),
        EXIT_USAGE,
        "pretrained=",
    ),
    BadInput(
        "lm-eval-pretrained-a-file",
        "evaluation",
        lambda ctx: _lm_eval("--model_args", f"pretrained={_file(ctx)}")(ctx),
        EXIT_USAGE,
        "is a file",
    ),
    BadInput(
        "lm-eval-pretrained-empty-dir",
        "evaluation",
        lambda ctx: _lm_eval("--model_args", f"pretrained={_empty_dir(ctx)}")(ctx),
        EXIT_USAGE,
        "has no config.json",
    ),
    BadInput(
        "lm-eval-pretrained-hub-id",
        "evaluation",
        _lm_eval("--model_args", f"pretrained={HUB_ID}"),
        EXIT_USAGE,
        "is not a local directory",
    ),
    BadInput(
        "lm-eval-pretrained-none-given",
        "evaluation",
        _lm_eval("--model_args", "method=baseline"),
        EXIT_USAGE,
        "--model repo-train needs the model directory",
    ),
    BadInput("lm-eval-no-model-args", "evaluation", _lm_eval(), EXIT_USAGE, "needs the model directory"),
    BadInput(
        "lm-eval-pretrained-empty",
        "evaluation",
        _lm_eval("--model_args", "pretrained="),
        EXIT_USAGE,
        "needs the model directory",
    ),
    BadInput(
        "lm-eval-chat-template-missing",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "--apply_chat_template"),
        EXIT_USAGE,
        "--apply_chat_template asks for the tokenizer's chat template",
    ),
    BadInput(
        "lm-eval-batch-size-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},method=ms_poe", "--batch_size", "0"),
        EXIT_USAGE,
        "--batch_size must be at least 1, got 0",
    ),
    BadInput(
        "lm-eval-batch-size-negative",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "--batch_size", "-2"),
        EXIT_USAGE,
        "--batch_size must be at least 1",
    ),
    BadInput(
        "lm-eval-model-args-batch-size-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},batch_size=0"),
        EXIT_USAGE,
        "--model_args batch_size must be at least 1",
    ),
    BadInput(
        "lm-eval-max-gen-toks-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},method=attention_buckets,max_gen_toks=0"),
        EXIT_USAGE,
        "--model_args max_gen_toks must be at least 1, got 0",
    ),
    BadInput(
        "lm-eval-gen-kwargs-max-gen-toks-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "--gen_kwargs", "max_gen_toks=0"),
        EXIT_USAGE,
        "--gen_kwargs max_gen_toks must be at least 1",
    ),
    BadInput(
        "lm-eval-dtype-nonsense",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},dtype=nonsense"),
        EXIT_USAGE,
        "dtype=nonsense: choose one of auto, float32, bfloat16, float16",
    ),
    # -- a damaged last.ckpt is named as damaged, never offered for a resume
    BadInput(
        "fit-beside-empty-last-ckpt",
        "repo_train",
        _beside_damaged_last(lambda data: b""),
        EXIT_USAGE,
        "which is damaged (",
    ),
    BadInput(
        "fit-beside-truncated-last-ckpt",
        "repo_train",
        _beside_damaged_last(lambda data: data[: len(data) // 2]),
        EXIT_USAGE,
        "which is damaged (",
    ),
    BadInput(
        "fit-beside-random-last-ckpt",
        "repo_train",
        _beside_damaged_last(lambda data: bytes(range(256)) * 8),
        EXIT_USAGE,
        "which is damaged (",
    ),
    # -- a method the log-likelihood task cannot run, on a mixed task list: refused before any generation
    BadInput(
        "pcd-on-generation-and-multiple-choice",
        "evaluation",
        _mixed_tasks("pcd"),
        EXIT_USAGE,
        "log-likelihood scoring ('multiple_choice') does not run",
        absent="out/records.jsonl",
    ),
    BadInput(
        "attention-buckets-on-mixed-tasks",
        "evaluation",
        _mixed_tasks("attention_buckets"),
        EXIT_USAGE,
        "evaluate it on generation tasks only",
        absent="out/records.jsonl",
    ),
    # -- more of the same kinds: other spellings, other keys, other shapes
    BadInput(
        "qs-dry-run-other-tools-script",
        "workflows",
        _quickstart_dry_run(("commands.sh", "#!/bin/sh\n# The commands this script ran, in order.\n")),
        EXIT_USAGE,
        "--out",
    ),
    BadInput(
        "eval-methods-empty-list-spaced",
        "evaluation",
        _evaluate("--methods", "[ ]"),
        EXIT_USAGE,
        "--methods is an empty list",
    ),
    BadInput(
        "fit-resume-max-steps-below-small-step",
        "repo_train",
        _resume_at(10, "--trainer.max_steps", "9"),
        EXIT_USAGE,
        "(10",
    ),
    BadInput(
        "pcd-ratio-just-above-one", "evaluation", _evaluate("--methods", "pcd:ratio=1.0000001"), EXIT_USAGE, "(0, 1]"
    ),
    BadInput("pcd-ratio-huge", "evaluation", _evaluate("--methods", "pcd:ratio=1e9"), EXIT_USAGE, "(0, 1]"),
    BadInput(
        "pcd-ratio-beside-alpha", "evaluation", _evaluate("--methods", "pcd:alpha=0.5,ratio=3"), EXIT_USAGE, "got 3"
    ),
    BadInput(
        "lm-eval-padded-key-leading",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}, method=pi"),
        EXIT_USAGE,
        "key ' method' has spaces",
    ),
    BadInput(
        "lm-eval-padded-pretrained",
        "evaluation",
        _lm_eval("--model_args", "pretrained ={model}"),
        EXIT_USAGE,
        "key 'pretrained ' has spaces",
    ),
    BadInput(
        "lm-eval-repeated-dtype",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},dtype=float32,dtype=bfloat16"),
        EXIT_USAGE,
        "dtype is given twice",
    ),
    BadInput(
        "lm-eval-dtype-float64",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},dtype=float64"),
        EXIT_USAGE,
        "choose one of auto",
    ),
    BadInput(
        "lm-eval-max-length-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model},max_length=0"),
        EXIT_USAGE,
        "--model_args max_length must be at least 1",
    ),
    BadInput(
        "lm-eval-max-batch-size-zero",
        "evaluation",
        _lm_eval(
            "--model_args",
            "pretrained={model}",
            "--batch_size",
            "auto",
            "--max_batch_size",
            "4",
            "--model_args",
            "max_batch_size=0",
        ),
        EXIT_USAGE,
        "--model_args max_batch_size must be",
    ),
    BadInput(
        "lm-eval-gen-kwargs-max-new-tokens-zero",
        "evaluation",
        _lm_eval("--model_args", "pretrained={model}", "--gen_kwargs", "max_new_tokens=0"),
        EXIT_USAGE,
        "--gen_kwargs max_new_tokens must be at least 1",
    ),
    BadInput(
        "lm-eval-pretrained-other-hub-id",
        "evaluation",
        _lm_eval("--model_args", "pretrained=Qwen/Qwen2-0.5B"),
        EXIT_USAGE,
        "is not a local directory",
    ),
    BadInput(
        "lm-eval-pretrained-without-tokenizer",
        "evaluation",
        lambda ctx: _lm_eval("--model_args", f"pretrained={_config_only(ctx)}")(ctx),
        EXIT_USAGE,
        "has no tokenizer",
    ),
    BadInput(
        "registry-name-plus-alone", "evaluation", _importing("evaluation", _method_named("+")), EXIT_USAGE, "holds '+'"
    ),
    BadInput(
        "preset-star-args-only",
        "repo_train",
        _importing("repo_train", _preset("*args")),
        EXIT_USAGE,
        "it takes no **overrides",
    ),
    BadInput(
        "preset-keyword-only-required",
        "repo_train",
        _importing("repo_train", _preset("*, width, **overrides")),
        EXIT_USAGE,
        "it requires width",
    ),
    BadInput(
        "fit-beside-zeroed-last-ckpt",
        "repo_train",
        _beside_damaged_last(lambda data: bytes(len(data))),
        EXIT_USAGE,
        "which is damaged (",
    ),
    # -- a fit config file whose section is not a section
    BadInput(
        "fit-config-model-a-number",
        "repo_train",
        _fit_config("model: 3\ntrainer: null\n"),
        EXIT_USAGE,
        "'model:' is 3, a int; it must be a section of keys",
    ),
    BadInput("fit-config-data-a-list", "repo_train", _fit_config("data: [1, 2]\n"), EXIT_USAGE, "'data:' is [1, 2]"),
    BadInput(
        "fit-config-trainer-a-boolean",
        "repo_train",
        _fit_config("trainer: true\n"),
        EXIT_USAGE,
        "'trainer:' is True, a bool",
    ),
    # -- the registries refuse names the spec syntax cannot name, and presets of the wrong shape
    BadInput(
        "registry-name-with-plus",
        "evaluation",
        _importing("evaluation", _method_named("a+b")),
        EXIT_USAGE,
        "method name 'a+b' holds '+'",
    ),
    BadInput(
        "registry-name-with-colon",
        "evaluation",
        _importing("evaluation", _method_named("x:y")),
        EXIT_USAGE,
        "holds ':'",
    ),
    BadInput(
        "registry-name-with-comma",
        "evaluation",
        _importing("evaluation", _method_named("p,q")),
        EXIT_USAGE,
        "holds ','",
    ),
    BadInput(
        "registry-name-with-equals",
        "evaluation",
        _importing("evaluation", _method_named("k=v")),
        EXIT_USAGE,
        "holds '='",
    ),
    BadInput(
        "registry-name-with-space",
        "evaluation",
        _importing("evaluation", _method_named("my method")),
        EXIT_USAGE,
        "holds ' '",
    ),
    BadInput(
        "preset-required-argument",
        "repo_train",
        _importing("repo_train", _preset("width")),
        EXIT_USAGE,
        "mine cannot be a preset (it requires width)",
    ),
    BadInput(
        "preset-no-overrides",
        "repo_train",
        _importing("repo_train", _preset("")),
        EXIT_USAGE,
        "it takes no **overrides",
    ),
    BadInput(
        "preset-positional-only",
        "repo_train",
        _importing("repo_train", _preset("config, /, **overrides")),
        EXIT_USAGE,
        "it requires config",
    ),
]


def _file(ctx: Context) -> str:
    (ctx.tmp / "weights.bin").write_bytes(b"not a model")
    return str(ctx.tmp / "weights.bin")


@pytest.mark.parametrize("row", row_params(ROWS))
def test_bad_input_is_refused_in_one_line(row, tmp_path, capsys, monkeypatch):
    check_row(row, tmp_path, capsys, monkeypatch)


def test_a_dry_run_on_a_full_disk_keeps_the_earlier_commands_sh(tmp_path, capsys, monkeypatch):
    """The dry run rewrites OUT/commands.sh whole and atomically: a full disk is one line naming the file and
    the fix, and the earlier dry run's script stays as it was, never torn."""
    out = tmp_path / "qs"
    assert workflows_main(["quickstart", "--config", FULL_SCALE, "--dry_run", "--out", str(out)]) == 0
    before = tree_bytes(tmp_path)
    full_disk_on(monkeypatch, atomic, "commands.sh")
    capsys.readouterr()
    assert workflows_main(["quickstart", "--config", FULL_SCALE, "--dry_run", "--out", str(out)]) == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "No space left on device while writing" in lines[0], lines
    assert str(out / "commands.sh") in lines[0] and "free space" in lines[0], lines
    assert tree_bytes(tmp_path) == before


def test_a_dry_run_reruns_over_its_own_output(tmp_path, capsys):
    """An earlier dry run's folder is the quickstart's own: taken again, the script rewritten, not appended."""
    out = tmp_path / "qs"
    argv = ["quickstart", "--config", FULL_SCALE, "--dry_run", "--out", str(out)]
    assert workflows_main(argv) == 0
    first = (out / "commands.sh").read_text()
    assert workflows_main(argv) == 0
    assert (out / "commands.sh").read_text() == first
    assert json.loads(json.dumps(first.count("#!/usr/bin/env bash"))) == 1


def test_one_question_gives_no_interval_as_if_exact(tmp_path, capsys):
    """One question resampled is itself: the summary leaves its intervals and shape out and the report says
    n=1, no CI, instead of `x [x, x]` and a shape."""
    from bad_input_helpers import run_cli

    argv = [*EVAL[:-1], "--num_examples", "1", "--methods", "baseline", "--methods", "pi:scale=2"]
    argv += ["--out", str(tmp_path / "out")]  # the tiny default: a RoPE model, which pi scales
    assert run_cli("evaluation", argv) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for result in summary["results"]["kv"].values():
        assert result["n_examples"] == 1 and result["accuracy_ci"] is None and result["shape"] is None
        assert result["rho_ci"] is None and result["middle_minus_edges_ci"] is None
    compared = summary["results"]["kv"]["pi:scale=2"]["vs_baseline"]
    assert compared["low"] is None and compared["high"] is None
    report = (tmp_path / "out" / "report.md").read_text()
    assert "one question (n=1), so no interval (no CI)" in report
    assert not any(" [" in line and line.startswith("| baseline") for line in report.splitlines())


def test_a_resume_with_fewer_methods_says_what_it_leaves_out(tmp_path, capsys):
    """The records of a method the resume does not name stay in records.jsonl; the run says so on stderr and
    in summary.json and report.md, never a summary of fewer methods without a word."""
    from bad_input_helpers import run_cli

    base = [*EVAL[:-1], "--out", str(tmp_path / "out")]  # the tiny default: a RoPE model, which pi scales
    assert run_cli("evaluation", [*base, "--methods", "baseline", "--methods", "pi:scale=2"]) == 0
    capsys.readouterr()
    assert run_cli("evaluation", [*base, "--methods", "baseline"]) == 0
    err = capsys.readouterr().err
    assert "also holds records of pi:scale=2" in err and "left out of this summary" in err, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["methods_left_out"] == ["pi:scale=2"] and list(summary["results"]["kv"]) == ["baseline"]
    assert "Not in this report: `pi:scale=2`" in (tmp_path / "out" / "report.md").read_text()


def test_ctrl_c_during_an_evaluation_exits_130_in_one_line_and_resumes(tmp_path, capsys, monkeypatch):
    """Ctrl-C after the first record: one line naming the directory, exit 130 (as `fit`); rerunning the same
    command resumes and ends with every record once."""
    from bad_input_helpers import run_cli

    from evaluation import results

    argv = [*EVAL, "--methods", "baseline", "--model", str(repo_model(tmp_path)), "--out", str(tmp_path / "out")]
    original, calls = results.RecordWriter.write, []

    def interrupted(self, record):
        calls.append(record)
        if len(calls) == 2:
            raise KeyboardInterrupt
        original(self, record)

    monkeypatch.setattr(results.RecordWriter, "write", interrupted)
    capsys.readouterr()
    assert run_cli("evaluation", argv) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGINT" in lines[0] and "run the same command again" in lines[0], lines
    kept = (tmp_path / "out" / "records.jsonl").read_text().splitlines()
    assert len(kept) == 1
    monkeypatch.setattr(results.RecordWriter, "write", original)
    assert run_cli("evaluation", argv) == 0
    done = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert len(done) == len({(r["task"], r["method"], r["id"]) for r in done}) > 1
    assert done[0] == json.loads(kept[0])


#: A full disk as torch's zip writer reports it (a RuntimeError) and as safetensors does (a SafetensorError).
TORCH_FULL_DISK = "[enforce fail at inline_container.cc:672] . unexpected pos 1024 vs 988"
SAFETENSORS_FULL_DISK = (
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
)


def test_a_checkpoint_on_a_full_disk_in_torchs_words_keeps_the_last_good_one(tmp_path, monkeypatch):
    """torch's zip writer says "unexpected pos" (a RuntimeError, not an OSError) when the disk is full: the
    checkpoint writer turns it into the OSError every command reports in one line, and the last good
    last.ckpt is kept."""
    from repo_common.cli_errors import environment_message
    from repo_train.training import atomic_checkpoint_io

    last = tmp_path / "last.ckpt"
    writer = atomic_checkpoint_io.AtomicCheckpointIO()
    writer.save_checkpoint({"global_step": 1}, last)
    before = tree_bytes(tmp_path)

    def full(*args, **kwargs):
        raise RuntimeError(TORCH_FULL_DISK)

    monkeypatch.setattr(atomic_checkpoint_io.torch, "save", full)
    with pytest.raises(OSError) as err:
        writer.save_checkpoint({"global_step": 2}, last)
    line = environment_message(err.value)
    assert "No space left on device (RuntimeError" in line and str(last) in line and "free space" in line, line
    assert "\n" not in line and tree_bytes(tmp_path) == before


def test_an_export_on_a_full_disk_in_safetensors_words_is_one_line(tmp_path, capsys, monkeypatch):
    """safetensors reports a full disk as SafetensorError: `export` says it in one line, exit 2, and the earlier
    export stays whole."""
    from bad_input_helpers import lightning_like, run_cli
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    checkpoint = lightning_like(tmp_path / "run.ckpt")
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf")]
    assert run_cli("repo_train", argv) == 0
    before = tree_bytes(tmp_path)

    def full(self, *args, **kwargs):
        raise SafetensorError(SAFETENSORS_FULL_DISK)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    capsys.readouterr()
    assert run_cli("repo_train", argv) == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "No space left on device (SafetensorError" in lines[0], lines
    assert str(tmp_path / "hf") in lines[0] and "free space" in lines[0], lines
    assert tree_bytes(tmp_path) == before


def test_the_stop_line_names_this_stops_own_checkpoint_after_a_second_signal(tmp_path):
    """SIGTERM wrote its checkpoint, then a second signal stopped the run at once: the line does not say it
    stopped "without writing a checkpoint; the last one is ..." of the very checkpoint this stop wrote."""
    from repo_train.checkpoints import INTERRUPTED_KEY
    from repo_train.training.cli import stop_line
    from repo_train.training.interrupt import Stop

    last = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "global_step": 131, INTERRUPTED_KEY: {"signal": "SIGTERM", "step": 131}}, last)
    line = stop_line(Stop("SIGTERM", 131, None), ["fit"], str(last), 300)
    assert "its checkpoint was written before the next signal" in line and str(last) in line, line
    assert "without writing" not in line
    older = stop_line(Stop("SIGTERM", 140, None), ["fit"], str(last), 300)  # the checkpoint of an earlier step
    assert "without writing a checkpoint; the last one is" in older, older
