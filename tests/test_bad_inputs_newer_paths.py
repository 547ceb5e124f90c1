"""Bad inputs to the paths added after the first tables (issue 40): method options that contradict each other,
damaged artefacts (amortised Found-in-the-Middle bias files), records and summaries.

Each row is a command line run in this process (`check_row`): its exit code, a phrase of the one stderr
line, and every file under the row's directory byte-identical afterwards.
"""

from __future__ import annotations

import errno
import functools
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input_helpers import EVAL, TINY_SEARCH, BadInput, Context, check_row, lightning_like, repo_model, run_cli
from transformers import PreTrainedModel

from repo_common.cli_errors import EXIT_USAGE, report_user_errors

#: A well-formed bias file (format fim-bias, version 1) for a 2-item prompt; rows damage one field.
BIAS = {
    "format": "fim-bias",
    "version": 1,
    "model": {"name": "tiny", "config_sha256": "0" * 64, "weights": "0" * 16},
    "template": "0" * 16,
    "num_items": 2,
    "dummy": "mdqa",
    "score_layers": [2, 3],
    "buckets": {"1-8": {"prompts": 3, "bias": [0.4, 0.6], "std": [0.1, 0.1]}},
    "calibration": {},
}


def _fim_bias(text: str) -> Callable[[Context], list[str]]:
    """An evaluation of the tiny model with `fim:calibration=amortised` reading a bias file holding `text`."""

    def make(ctx: Context) -> list[str]:
        path = ctx.tmp / "bias.json"
        path.write_text(text)
        spec = f"fim:calibration=amortised,bias_file={path}"
        return [*EVAL, "--methods", spec, "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]

    return make


def _damaged_bias(**bucket_or_field) -> Callable[[Context], list[str]]:
    """BIAS with one bucket's `bias` list or one top-level field replaced (json writes NaN and Infinity)."""
    data = json.loads(json.dumps(BIAS))
    if "bias" in bucket_or_field:
        data["buckets"]["1-8"]["bias"] = bucket_or_field.pop("bias")
    data.update(bucket_or_field)
    return _fim_bias(json.dumps(data))


def _mdqa_line(**fields) -> Callable[[Context], list[str]]:
    """An evaluation of MDQA on a one-question nq-open file whose line has `fields` changed."""
    line = {"question": "who wrote it?", "answers": ["Ann Lee"], "ctxs": [{"title": "T", "text": "Ann Lee wrote it."}]}
    line.update(fields)

    def make(ctx: Context) -> list[str]:
        data = ctx.tmp / "data"
        data.mkdir()
        (data / "nq-open-oracle.jsonl").write_text(json.dumps(line) + "\n")
        return [*EVAL, "--tasks", "mdqa", "--data_dir", str(data), "--num_documents", "1", "--num_examples", "1",
                "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]  # fmt: skip

    return make


def _importing(cli: str, name: str, source: str) -> Callable[[Context], list[str]]:
    """`evaluation run` or `search run` with `--import` of a file ctx.tmp/NAME holding `source` (given by its path
    when NAME ends in .py, else by its module name from ctx.tmp as the current directory)."""

    def make(ctx: Context) -> list[str]:
        (ctx.tmp / (name if name.endswith(".py") else f"{name}.py")).write_text(source)
        given = str(ctx.tmp / name) if name.endswith(".py") else name
        if cli == "search":
            return ["run", "--config", TINY_SEARCH, "--import", given, "--out", str(ctx.tmp / "scales" / "s.json")]
        return [*EVAL, "--import", given, "--out", str(ctx.tmp / "out")]

    return make


EXITS = "import sys\nsys.exit(0)\n"


def _chat(template: str | None, *extra: str) -> Callable[[Context], list[str]]:
    """An evaluation with `--chat_template true` of a tiny model whose tokenizer has `template` (None: none)."""

    def make(ctx: Context) -> list[str]:
        from transformers import AutoTokenizer  # heavy: only the rows that build a templated tokenizer

        model = repo_model(ctx.tmp)
        if template is not None:
            tokenizer = AutoTokenizer.from_pretrained(model)
            tokenizer.chat_template = template
            tokenizer.save_pretrained(model)
        return [*EVAL, "--chat_template", "true", *extra, "--model", str(model), "--out", str(ctx.tmp / "out")]

    return make


#: A file name longer than any file system allows (255 bytes a name on Linux).
LONG_NAME = "x" * 300


def _long_out(cli: str) -> Callable[[Context], list[str]]:
    """A command writing to an --out whose last name is 300 characters."""

    def make(ctx: Context) -> list[str]:
        if cli == "search":
            return ["run", "--config", TINY_SEARCH, "--out", str(ctx.tmp / f"{LONG_NAME}.json")]
        if cli == "repo_train":
            checkpoint = lightning_like(ctx.tmp / "last.ckpt")
            return ["export", "--checkpoint", str(checkpoint), "--out", str(ctx.tmp / LONG_NAME)]
        return [*EVAL, "--out", str(ctx.tmp / LONG_NAME)]

    return make


def _multiple_choice_line(line: dict) -> Callable[[Context], list[str]]:
    """An evaluation of `multiple_choice` on a file whose lines are `line`."""

    def make(ctx: Context) -> list[str]:
        path = ctx.tmp / "mc.jsonl"
        path.write_text((json.dumps(line) + "\n") * 2)  # EVAL asks for two examples
        return [*EVAL, "--tasks", "multiple_choice", "--task_param", f"multiple_choice:path={path}",
                "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]  # fmt: skip

    return make


def _method(spec: str) -> Callable[[Context], list[str]]:
    return lambda ctx: [*EVAL, "--methods", spec, "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]


@functools.cache
def _finished_run() -> Path:
    """One finished evaluation run of the tiny model (records, summary), made once; rows copy it."""
    root = Path(tempfile.mkdtemp(prefix="finished-run-"))
    argv = [*EVAL, "--model", str(repo_model(root)), "--out", str(root / "out")]
    assert run_cli("evaluation", argv) == 0
    return root / "out"


def _summarize_after(edit: Callable[[list[dict]], list[dict]]) -> Callable[[Context], list[str]]:
    """`summarize` of a copy of the finished run whose records `edit` changed (its good summary.json kept)."""

    def make(ctx: Context) -> list[str]:
        out = shutil.copytree(_finished_run(), ctx.tmp / "out")
        records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        lines = [json.dumps(record) for record in edit(records)]  # json writes NaN as NaN
        (out / "records.jsonl").write_text("\n".join(lines) + "\n")
        return ["summarize", "--out", str(out)]

    return make


def _first_score(value) -> Callable[[list[dict]], list[dict]]:
    return lambda records: [{**records[0], "score": value}, *records[1:]]


ROWS = [
    # == method options that contradict each other or the model ==
    BadInput(
        "caliope-hourglass-inverted",
        "evaluation",
        _method("caliope:calibrator=hourglass,delta_min=10,delta_max=1"),
        EXIT_USAGE,
        "delta_min=10 > delta_max=1 would invert the hourglass",
        absent="out",
    ),
    BadInput(
        "caliope-hourglass-min-above-default-max",
        "evaluation",
        _method("caliope:calibrator=hourglass,delta_min=5000"),
        EXIT_USAGE,
        "use delta_min <= delta_max",
        absent="out",
    ),
    BadInput(
        "ms-poe-min-above-max",
        "evaluation",
        _method("ms_poe:min_ratio=2,max_ratio=1"),
        EXIT_USAGE,
        "max_ratio must be >= min_ratio=2",
        absent="out",
    ),
    BadInput(
        "ms-poe-start-layer-past-the-model",
        "evaluation",
        _method("ms_poe:start_layer=4"),
        EXIT_USAGE,
        "start_layer=4 but the model has 4 layers",
        absent="out",
    ),
    # == amortised Found-in-the-Middle bias files with damaged values ==
    BadInput("fim-bias-nan", "evaluation", _damaged_bias(bias=[float("nan"), 0.5]), EXIT_USAGE, "not a finite number"),
    BadInput(
        "fim-bias-infinity",
        "evaluation",
        _damaged_bias(bias=[float("inf"), 0.5]),
        EXIT_USAGE,
        "not a finite number",
    ),
    BadInput(
        "fim-bias-too-short", "evaluation", _damaged_bias(bias=[0.5]), EXIT_USAGE, "bias must be a list of 2 numbers"
    ),
    BadInput(
        "fim-bias-too-long",
        "evaluation",
        _damaged_bias(bias=[0.2, 0.3, 0.5]),
        EXIT_USAGE,
        "bias must be a list of 2 numbers",
    ),
    BadInput("fim-bias-strings", "evaluation", _damaged_bias(bias=["0.4", "0.6"]), EXIT_USAGE, "not a finite number"),
    BadInput("fim-bias-booleans", "evaluation", _damaged_bias(bias=[True, False]), EXIT_USAGE, "not a finite number"),
    BadInput("fim-bias-a-number", "evaluation", _damaged_bias(bias=0.5), EXIT_USAGE, "bias must be a list of 2"),
    BadInput(
        "fim-bias-items-as-text", "evaluation", _damaged_bias(num_items="2"), EXIT_USAGE, "num_items must be an integer"
    ),
    BadInput(
        "fim-bias-zero-items", "evaluation", _damaged_bias(num_items=0), EXIT_USAGE, "num_items must be an integer >= 1"
    ),
    BadInput(
        "fim-bias-no-buckets", "evaluation", _damaged_bias(buckets={}), EXIT_USAGE, "buckets must be a non-empty object"
    ),
    BadInput(
        "fim-bias-layers-as-text",
        "evaluation",
        _damaged_bias(score_layers="last_half"),
        EXIT_USAGE,
        "score_layers must be a list of integers",
    ),
    BadInput(
        "fim-bias-model-as-list", "evaluation", _damaged_bias(model=["tiny"]), EXIT_USAGE, "model must be an object"
    ),
    BadInput("fim-bias-a-list", "evaluation", _fim_bias("[1, 2]"), EXIT_USAGE, "is not a Found-in-the-Middle bias"),
    # == records that summarize must not count (the good summary.json stays as it is) ==
    BadInput(
        "summarize-nan-score",
        "evaluation",
        _summarize_after(_first_score(float("nan"))),
        EXIT_USAGE,
        "records.jsonl:1: field 'score' must be a finite number, got nan",
    ),
    BadInput(
        "summarize-infinite-score",
        "evaluation",
        _summarize_after(_first_score(float("inf"))),
        EXIT_USAGE,
        "field 'score' must be a finite number, got inf",
    ),
    BadInput(
        "summarize-score-above-one",
        "evaluation",
        _summarize_after(_first_score(5.0)),
        EXIT_USAGE,
        "field 'score' is 5.0, outside [0, 1] for metric",
    ),
    BadInput(
        "summarize-negative-score",
        "evaluation",
        _summarize_after(_first_score(-3)),
        EXIT_USAGE,
        "field 'score' is -3, outside [0, 1]",
    ),
    BadInput(
        "summarize-string-score",
        "evaluation",
        _summarize_after(_first_score("1.0")),
        EXIT_USAGE,
        "field 'score' must be a finite number, got '1.0'",
    ),
    BadInput(
        "summarize-boolean-score",
        "evaluation",
        _summarize_after(_first_score(True)),
        EXIT_USAGE,
        "field 'score' must be a finite number, got True",
    ),
    BadInput(
        "summarize-null-score",
        "evaluation",
        _summarize_after(_first_score(None)),
        EXIT_USAGE,
        "field 'score' must be a finite number, got None",
    ),
    BadInput(
        "summarize-numeric-method",
        "evaluation",
        _summarize_after(lambda records: [{**records[0], "method": 3}, *records[1:]]),
        EXIT_USAGE,
        "field 'method' must be a string, got 3",
    ),
    # == MDQA lines whose fields are empty or of the wrong type ==
    BadInput("mdqa-empty-answer", "evaluation", _mdqa_line(answers=[""]), EXIT_USAGE, "is empty once normalised"),
    BadInput(
        "mdqa-article-answer",
        "evaluation",
        _mdqa_line(answers=["The", " "]),
        EXIT_USAGE,
        "any prediction would match it",
    ),
    BadInput(
        "mdqa-numeric-answers",
        "evaluation",
        _mdqa_line(answers=[1912]),
        EXIT_USAGE,
        "'answers' must be a non-empty list of strings",
    ),
    BadInput(
        "mdqa-answers-as-object",
        "evaluation",
        _mdqa_line(answers={"a": "Ann"}),
        EXIT_USAGE,
        "'answers' must be a non-empty list of strings",
    ),
    BadInput(
        "mdqa-numeric-question",
        "evaluation",
        _mdqa_line(question=7),
        EXIT_USAGE,
        "'question' must be a non-empty string",
    ),
    BadInput(
        "mdqa-blank-question",
        "evaluation",
        _mdqa_line(question="  "),
        EXIT_USAGE,
        "'question' must be a non-empty string",
    ),
    BadInput(
        "mdqa-ctxs-as-object",
        "evaluation",
        _mdqa_line(ctxs={"title": "T", "text": "x"}),
        EXIT_USAGE,
        "'ctxs' must be a list of passages",
    ),
    BadInput(
        "mdqa-numeric-passage-text",
        "evaluation",
        _mdqa_line(ctxs=[{"title": "T", "text": 5}]),
        EXIT_USAGE,
        "must be strings",
    ),
    # == --import of code that exits, or that would replace a module everyone imports ==
    BadInput(
        "eval-import-file-that-exits",
        "evaluation",
        _importing("evaluation", "exits.py", EXITS),
        EXIT_USAGE,
        "the module called sys.exit(0) while being imported",
        absent="out",
    ),
    BadInput(
        "eval-import-module-that-exits",
        "evaluation",
        _importing("evaluation", "exits_mod", EXITS),
        EXIT_USAGE,
        "called sys.exit(0)",
        absent="out",
    ),
    BadInput(
        "eval-import-exits-with-code",
        "evaluation",
        _importing("evaluation", "exits3.py", "raise SystemExit(3)\n"),
        EXIT_USAGE,
        "called sys.exit(3)",
        absent="out",
    ),
    BadInput(
        "search-import-file-that-exits",
        "search",
        _importing("search", "exits.py", EXITS),
        EXIT_USAGE,
        "called sys.exit(0)",
        absent="scales",
    ),
    BadInput(
        "eval-import-file-named-json",
        "evaluation",
        _importing("evaluation", "json.py", "X = 1\n"),
        EXIT_USAGE,
        "the module name 'json' is already taken",
        absent="out",
    ),
    BadInput(
        "eval-import-file-named-like-the-project",
        "evaluation",
        _importing("evaluation", "evaluation.py", "X = 1\n"),
        EXIT_USAGE,
        "'evaluation' is already taken",
        absent="out",
    ),
    BadInput(
        "search-import-file-named-random",
        "search",
        _importing("search", "random.py", "X = 1\n"),
        EXIT_USAGE,
        "the module name 'random' is already taken",
        absent="scales",
    ),
    BadInput(
        "eval-import-stdlib-module-name",
        "evaluation",
        _importing("evaluation", "os", "X = 1\n"),
        EXIT_USAGE,
        "'os' is a module of Python's standard library",
        absent="out",
    ),
    # == chat templates that are missing or fail ==
    BadInput(
        "chat-template-missing", "evaluation", _chat(None), EXIT_USAGE, "has none; drop --chat_template", absent="out"
    ),
    BadInput(
        "chat-template-syntax-error",
        "evaluation",
        _chat("{% for m in messages %}{{ m['content'] }"),
        EXIT_USAGE,
        "TemplateSyntaxError",
        absent="out",
    ),
    BadInput(
        "chat-template-refuses-system-role",
        "evaluation",
        _chat(
            "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system') }}"
            "{% endif %}{{ m['content'] }}{% endfor %}",
            "--system_prompt",
            "Be brief.",
        ),
        EXIT_USAGE,
        "fails on a system/user conversation (TemplateError: no system)",
        absent="out",
    ),
    BadInput(
        "chat-template-calls-nothing",
        "evaluation",
        _chat("{{ no_such_function() }}"),
        EXIT_USAGE,
        "the tokenizer's chat template fails on a user conversation",
        absent="out",
    ),
    # == paths the file system refuses ==
    BadInput("eval-out-name-too-long", "evaluation", _long_out("evaluation"), EXIT_USAGE, "choose a shorter"),
    BadInput("search-out-name-too-long", "search", _long_out("search"), EXIT_USAGE, "choose a shorter"),
    BadInput("export-out-name-too-long", "repo_train", _long_out("repo_train"), EXIT_USAGE, "choose a shorter"),
    BadInput(
        "boolq-answer-as-text",
        "evaluation",
        _multiple_choice_line({"question": "q", "passage": "p", "answer": "yes"}),
        EXIT_USAGE,
        "BoolQ 'answer' must be true or false (a JSON boolean), got 'yes'",
        absent="out",
    ),
    BadInput(
        "eval-a-billion-examples",
        "evaluation",
        lambda ctx: [*EVAL, "--num_examples", "1000000000", "--out", str(ctx.tmp / "out")],
        EXIT_USAGE,
        "num_examples=1,000,000,000 is more than one run builds",
        absent="out",
    ),
    # == rows: insert above this line ==
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row: BadInput, tmp_path, capsys, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)  # `--import NAME` finds NAME.py in the current directory, as `python -m` does
    monkeypatch.syspath_prepend(str(tmp_path))  # and the path the import adds is taken out again afterwards
    check_row(row, tmp_path, capsys, monkeypatch)


def test_summarize_reports_a_torn_last_line_and_leaves_it_for_the_resume(tmp_path, capsys):
    out = shutil.copytree(_finished_run(), tmp_path / "out")
    records = out / "records.jsonl"
    records.write_bytes(records.read_bytes() + b'{"id": "torn')
    before = records.read_bytes()
    assert run_cli("evaluation", ["summarize", "--out", str(out), "--no_report"]) == 0
    assert "ends in a torn line" in capsys.readouterr().err
    assert records.read_bytes() == before  # the run that resumes repairs it, not summarize


def test_a_full_disk_during_export_is_one_line_and_keeps_the_earlier_export(tmp_path, capsys, monkeypatch):
    """ENOSPC while the weights are written: one line naming the fix, exit 2, the earlier export byte-identical."""
    checkpoint = lightning_like(tmp_path / "last.ckpt")
    out = tmp_path / "hf"
    assert run_cli("repo_train", ["export", "--checkpoint", str(checkpoint), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(self, directory, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory) + "/model.safetensors")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    capsys.readouterr()
    assert run_cli("repo_train", ["export", "--checkpoint", str(checkpoint), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "No space left on device" in err and "with free space" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left behind


@pytest.mark.parametrize(
    ("error", "phrase"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/runs/a/w.bin"),
            "cannot write /runs/a/w.bin: No space left",
        ),
        (OSError(errno.EROFS, "Read-only file system", "/ro/x"), "read-only: write the outputs elsewhere"),
        (OSError(errno.ENAMETOOLONG, "File name too long", "/x" * 200), "choose a shorter"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "Disk quota exceeded; free space within your disk quota"),
    ],
)
def test_the_disk_and_the_path_are_one_line_in_every_command(error, phrase, capsys):
    """Whatever a command counts as a user error, a full disk, a read-only file system or a too-long path is one."""

    def fails() -> int:
        raise error

    assert report_user_errors("prog run", fails, (ValueError,)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("prog run: error: ") and err.count("\n") == 1 and phrase in err, err


def test_other_os_errors_keep_their_traceback():
    """An I/O error is not the user's doing: it stays a traceback (exit 1) unless the command counts OSError."""

    def fails() -> int:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        report_user_errors("prog run", fails, (ValueError,))


def test_a_record_written_twice_is_counted_once_and_named(tmp_path, capsys):
    out = shutil.copytree(_finished_run(), tmp_path / "out")
    records = out / "records.jsonl"
    first = records.read_text().splitlines()[0]
    records.write_text(records.read_text() + first + "\n")
    lines = len(records.read_text().splitlines())
    assert run_cli("evaluation", ["summarize", "--out", str(out), "--no_report"]) == 0
    assert f"records.jsonl:{lines} repeats line 1 exactly (one record written twice); counted once" in (
        capsys.readouterr().err
    )
