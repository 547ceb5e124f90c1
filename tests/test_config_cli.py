"""The shared command-line parser: jsonargparse's errors as one line, old flag forms, files before options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, dump_config, one_line_error


@dataclass
class Section:
    """A nested section, as the search's `ga:` or the quickstart's `train:`."""

    size: int
    names: list[str] = field(default_factory=list)


def _parser() -> ConfigParser:
    parser = ConfigParser.for_command("prog run", "a test command")
    parser.add_argument("--out", type=str, required=True)
    parser.add_argument("--count", type=PositiveInt, default=1)
    parser.add_argument("--max_size", type=PositiveInt, default=1)
    parser.add_argument("--mode", type=Literal["a", "b"] | None, default=None)
    parser.add_argument("--words", type=list[str], default=[])
    parser.add_argument("--section", type=Section | None, default=None)
    parser.repeatable = ("words",)
    parser.spelling_hints = {"--size": "--section.size", "--word": "--words"}
    return parser


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--count", "0"], "option --count: expected a positive integer, got 0"),
        (["--count", "x"], "option --count: expected a positive integer, got 'x'"),
        (["--mode", "c"], "option --mode: expected one of ['a', 'b'], got 'c'"),
        (["--nope", "1"], "unrecognized arguments: --nope 1"),
        ([], "missing option --out"),
        (["--section", '{"sise": 3}'], "unknown key 'section.sise'"),
        (["--section", '{"names": ["x"]}'], "missing key 'section.size'"),
        (["--section", '{"size": "big"}'], "option --section.size: expected int, got 'big'"),
    ],
)
def test_errors_are_one_line_naming_the_key(capsys, argv, line):
    argv = argv if argv == [] or "--out" in argv else ["--out", "o", *argv]
    with pytest.raises(SystemExit) as stop:
        _parser().parse(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err == f"prog run: error: {line} (see prog run --help)\n"


def test_a_message_that_is_not_jsonargparse_s_passes_through():
    assert one_line_error("plain\n  words") == "plain words" and one_line_error("") == "invalid configuration"


def test_repeatable_lists_and_files_before_options(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("out: from-file\ncount: 3\nwords: [z]\nsection: {size: 1}\n")
    options, show = _parser().parse(
        ["--count", "5", "--words", "a", "--section.size", "7", "--config", str(config), "--words=[b, c]",
         "--words", "d", "--print_config"]
    )  # fmt: skip
    assert show and options.out == "from-file" and options.count == 5 and type(options.count) is int
    assert options.words == ["a", "b", "c", "d"] and options.section.size == 7
    assert _parser().parse(["--out", "o", "--words", "[x, y]"])[0].words == ["x", "y"]


def test_a_repeatable_option_s_bad_list_is_one_line(capsys):
    with pytest.raises(SystemExit):
        _parser().parse(["--out", "o", "--words", "[x, y"])
    err = capsys.readouterr().err
    assert err == (
        "prog run: error: option --words: '[x, y' is not a YAML list; give one item per --words, or [A, B] "
        "(see prog run --help)\n"
    )


@pytest.mark.parametrize(
    ("flag", "hint"),
    [
        ("--max-size", "--max_size"),
        ("--max-size=2", "--max_size"),
        ("--section-size", None),  # no option --section_size: jsonargparse's own "unrecognized"
        ("--size", "--section.size"),
        ("--word", "--words"),
        ("--print-config", "--print_config"),
    ],
)
def test_one_spelling_per_option_the_other_named(capsys, flag, hint):
    with pytest.raises(SystemExit) as stop:
        _parser().parse(["--out", "o", flag, *([] if "=" in flag else ["2"])])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    expected = (
        f"{flag.split('=')[0]} is spelt {hint} (an option is spelt as its config key)" if hint else "unrecognized"
    )
    assert expected in err


def test_config_files_are_checked(tmp_path, capsys):
    (tmp_path / "list.yaml").write_text("- a\n")
    (tmp_path / "empty.yaml").write_text("")
    for name, line in (("list.yaml", "the top level must be a mapping"), ("none.yaml", "no config file at")):
        with pytest.raises(SystemExit):
            _parser().parse(["--config", str(tmp_path / name)])
        assert line in capsys.readouterr().err
    options, _ = _parser().parse(["--config", str(tmp_path / "empty.yaml"), "--out", "o"])
    assert options.out == "o"


def test_dump_config_writes_plain_values_in_order():
    options, _ = _parser().parse(["--out", "o", "--count", "2"])
    text = dump_config({"out": options.out, "count": options.count, "section": {"size": PositiveInt(3)}})
    assert text == "out: o\ncount: 2\nsection:\n  size: 3\n"


def test_take_flag_collects_both_spellings_in_order_and_names_a_missing_value():
    from repo_common.config_cli import take_flag

    assert take_flag(["a", "--f", "1", "b", "--f=2"], "--f") == (["1", "2"], ["a", "b"])
    with pytest.raises(ValueError, match="argument --f: expected one argument"):
        take_flag(["a", "--f"], "--f")


def test_no_command_declares_an_option_spelt_with_dashes():
    """One spelling per option, its config key: every `add_argument("--...")` of the project is a key's name
    (`--batch_size`), so no option has a dashed twin (81 had one before 2026-11-29)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dashed = []
    for package in ("repo_common", "repo_train", "evaluation", "search", "workflows", "scripts", "examples"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                    flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                    dashed += [f"{path.relative_to(root)}: {flag}" for flag in flags if "-" in flag.lstrip("-")]
    assert not dashed, dashed
