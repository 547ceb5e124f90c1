"""The `python -m workflows` commands that moved from scripts/ write only through the output guard (issue 40).

`study-real-model` and `reproduce-reversal` resume from their `--out` directory: it is recognised as theirs
by the header of its commands.sh, which names the command, never by a file's mere presence;
`crosscheck-lm-eval` recognises its own `--out` report by the `command` key the report holds. A user's
folder or file there (also a config.yaml or commands.sh of their own), and a `--model` directory that
`python -m repo_train real-model` did not write, are refused in one line (exit code 2) that names the path
and the fix, before anything is written: every file that was there is byte-identical afterwards and none
is added (`tree_bytes`). Below the table: their own earlier output is taken.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from bad_input_helpers import BadInput, Context, check_row, row_params
from safetensors.torch import save_file
from workflow_commands import parse_args

from repo_common.cli_errors import EXIT_USAGE
from workflows.cli import main
from workflows.lm_eval_crosscheck import command as crosscheck
from workflows.real_model_study import command as study
from workflows.reversal import command as reversal

STUDY = ["study-real-model", "--quick", "--dry_run"]
REVERSAL = ["reproduce-reversal", "--seeds", "1", "--methods", "rope", "--steps", "3"]


def _folder_with(*files: tuple[str, str]) -> Callable[[Context], Path]:
    """ctx.tmp/out holding the user's own `files` (name, text)."""

    def make(ctx: Context) -> Path:
        folder = ctx.tmp / "out"
        folder.mkdir()
        for name, text in files:
            (folder / name).write_text(text)
        return folder

    return make


USER_CONFIG = ("config.yaml", "my: own settings\n")
USER_COMMANDS = ("commands.sh", "#!/usr/bin/env bash\n# my own commands\necho hello\n")


def _user_json(ctx: Context) -> Path:
    path = ctx.tmp / "crosscheck.json"
    path.write_text(json.dumps({"my": "own results", "settings": {"task": "mdqa"}}))
    return path


def _smollm2_of_the_user(ctx: Context) -> Path:
    """A model directory as a user downloads it (config.json, weights), without real-model's provenance.json."""
    folder = ctx.tmp / "SmolLM2-135M-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    save_file({"x": torch.zeros(2)}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _out(ctx: Context) -> str:
    return str(ctx.tmp / "study")


ROWS = [
    BadInput(
        "study-dry-run-over-a-user-config-yaml",
        "workflows",
        lambda ctx: [*STUDY, "--out", str(_folder_with(USER_CONFIG)(ctx))],
        EXIT_USAGE,
        "(config.yaml; has no commands.sh, so it is not a real-model study): it is left as it is; pass another --out",
    ),
    BadInput(
        "study-dry-run-over-a-user-commands-sh",
        "workflows",
        lambda ctx: [*STUDY, "--out", str(_folder_with(USER_COMMANDS, USER_CONFIG)(ctx))],
        EXIT_USAGE,
        "its commands.sh is not a real-model study's",
    ),
    BadInput(
        "study-out-is-a-file",
        "workflows",
        lambda ctx: [*STUDY, "--out", str(_user_json(ctx))],
        EXIT_USAGE,
        "crosscheck.json is a file, not a directory",
    ),
    BadInput(
        "study-on-a-model-real-model-did-not-write",
        "workflows",
        lambda ctx: [*STUDY, "--out", _out(ctx), "--model", str(_smollm2_of_the_user(ctx))],
        EXIT_USAGE,
        "has no provenance.json, so it is not a model of python -m repo_train real-model): it is left as it is; "
        "pass --model a new directory",
    ),
    BadInput(
        "study-no-questions",
        "workflows",
        lambda ctx: [*STUDY, "--out", _out(ctx), "--questions", "0"],
        EXIT_USAGE,
        "--questions must be >= 1",
    ),
    BadInput(
        "study-data-missing",
        "workflows",
        lambda ctx: [*STUDY, "--out", _out(ctx), "--data", str(ctx.tmp / "nq.jsonl.gz")],
        EXIT_USAGE,
        "nq.jsonl.gz' not found; download qa_data/nq-open-oracle.jsonl.gz of the Lost in the Middle release (Liu et "
        "al., TACL 2024) from github.com/nelson-liu/lost-in-the-middle and pass it as --data",
    ),
    BadInput(
        "study-gpu-without-data",
        "workflows",
        lambda ctx: ["study-real-model", "--gpu", "--out", _out(ctx)],
        EXIT_USAGE,
        "--gpu needs 199 questions and the packaged sample has 40: download qa_data/nq-open-oracle.jsonl.gz",
    ),
    BadInput(
        "crosscheck-data-missing",
        "workflows",
        lambda ctx: ["crosscheck-lm-eval", "--data", str(ctx.tmp / "nq.jsonl.gz"), "--out", str(ctx.tmp / "c.json")],
        EXIT_USAGE,
        "nq.jsonl.gz' not found; download qa_data/nq-open-oracle.jsonl.gz of the Lost in the Middle release",
    ),
    BadInput(
        "crosscheck-model-misspelt",
        "workflows",
        lambda ctx: ["crosscheck-lm-eval", "--model", "models/no-such-model", "--out", str(ctx.tmp / "c.json")],
        EXIT_USAGE,
        "--model 'models/no-such-model': no such directory",
    ),
    BadInput(
        "crosscheck-out-over-a-user-json",
        "workflows",
        lambda ctx: ["crosscheck-lm-eval", "--out", str(_user_json(ctx))],
        EXIT_USAGE,
        "crosscheck.json exists and is not a cross-check report of this run: nothing was written; pass another "
        "--out, or delete",
    ),
    BadInput(
        "crosscheck-out-is-a-folder",
        "workflows",
        lambda ctx: ["crosscheck-lm-eval", "--out", str(_folder_with(USER_CONFIG)(ctx))],
        EXIT_USAGE,
        "is a directory, not a file",
    ),
    BadInput(
        "crosscheck-empty-out",
        "workflows",
        lambda ctx: ["crosscheck-lm-eval", "--out", ""],
        EXIT_USAGE,
        "--out is empty",
    ),
    BadInput(
        "reversal-over-a-user-folder",
        "workflows",
        lambda ctx: [*REVERSAL, "--out", str(_folder_with(USER_CONFIG, ("results.md", "# my notes\n"))(ctx))],
        EXIT_USAGE,
        "has no commands.sh, so it is not a reversal reproduction",
    ),
    BadInput(
        "reversal-over-a-user-commands-sh",
        "workflows",
        lambda ctx: [*REVERSAL, "--out", str(_folder_with(USER_COMMANDS)(ctx))],
        EXIT_USAGE,
        "its commands.sh is not a reversal reproduction's",
    ),
    BadInput(
        "reversal-out-is-a-file",
        "workflows",
        lambda ctx: [*REVERSAL, "--out", str(_user_json(ctx))],
        EXIT_USAGE,
        "is a file, not a directory",
    ),
]


@pytest.mark.parametrize("row", row_params(ROWS))
def test_refused_before_any_write(row: BadInput, tmp_path, capsys, monkeypatch):
    check_row(row, tmp_path / "row", capsys, monkeypatch)


# ----------------------------------------------------------------------------- their own earlier output


def _earlier_run(folder: Path, description: str) -> Path:
    """A directory whose commands.sh a command's runner began (header `description`), with a file it wrote."""
    folder.mkdir()
    (folder / "commands.sh").write_text(f"#!/usr/bin/env bash\n# {description}\nset -euo pipefail\n")
    (folder / "config.yaml").write_text("threads: 1\n")
    return folder


@pytest.mark.parametrize("description", study.DESCRIPTIONS)
def test_the_study_takes_its_own_earlier_output(tmp_path, description):
    """Its own directory, also one that scripts/study_real_model.py began before the command moved."""
    out = _earlier_run(tmp_path / "study", description)
    (out / "speed.json").write_text(json.dumps({"prompts_per_second": 1.0, "score": "metric"}))
    options = parse_args("study-real-model", [*STUDY[1:], "--out", str(out)])
    assert options.out == str(out) and options.size["questions"] == study.SIZES["quick"]["questions"]


@pytest.mark.parametrize("description", reversal.DESCRIPTIONS)
def test_the_reversal_takes_its_own_earlier_output(tmp_path, description):
    out = _earlier_run(tmp_path / "reversal", description)
    (out / "runs.json").write_text("{}")
    assert parse_args("reproduce-reversal", [*REVERSAL[1:], "--out", str(out)]).out == str(out)


def test_the_crosscheck_takes_its_own_earlier_report(tmp_path):
    report = tmp_path / "crosscheck.json"
    report.write_text(json.dumps({"command": crosscheck.COMMAND, "settings": {"task": "mdqa"}}))
    options = parse_args("crosscheck-lm-eval", ["--out", str(report)])
    assert options.out == str(report)


@pytest.mark.slow  # the speed probe loads SmolLM2 and runs a batch (~1 min on two cores)
def test_a_study_dry_run_reruns_over_its_own_output(real_model_dir, tmp_path, capsys):
    """The dry run writes commands.sh, config.yaml and the speed probe; a second dry run takes that directory."""
    out = tmp_path / "study"
    argv = [*STUDY, "--out", str(out), "--model", str(real_model_dir), "--threads", "1"]
    assert main(argv) == 0
    assert (out / "commands.sh").read_text().splitlines()[1] == f"# {study.DESCRIPTIONS[0]}"
    speed = (out / "speed.json").read_bytes()
    assert main([*argv[:-1], "2"]) == 0  # other --threads: config.yaml rewritten, the speed probe kept
    assert "threads: 2" in (out / "config.yaml").read_text() and (out / "speed.json").read_bytes() == speed
