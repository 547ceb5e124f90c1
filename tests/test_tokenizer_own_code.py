"""A tokenizer directory that ships its own code (`auto_map`): loaded only where none of that code runs.

The policy (repo_common/model_directory.py): a model's code is never run. An
auto_map beside a `tokenizer_class` of transformers' own is ignored by
AutoTokenizer (it loads its own class), so such a tokenizer is accepted; any
other auto_map is refused in one line. Each case writes a module that would
leave a marker file if it were imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_input_helpers import with_tokenizer
from transformers import AutoTokenizer

from repo_common.model_directory import check_tokenizer_files
from repo_train.data.text import load_tokenizer


def tokenizer_with_code(tmp: Path, tokenizer_class: str | None) -> tuple[Path, Path]:
    """The byte tokenizer whose tokenizer_config.json names tokenization_mine.MineTokenizer (auto_map) and
    `tokenizer_class`; (directory, the marker file importing tokenization_mine.py would write)."""
    directory = with_tokenizer(tmp / "tokenizer")
    marker = tmp / "the-directory's-code-ran"
    code = f"open({str(marker)!r}, 'w').close()\nfrom transformers import PreTrainedTokenizerFast as MineTokenizer\n"
    (directory / "tokenization_mine.py").write_text(code)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_mine.MineTokenizer", None]}
    config.pop("tokenizer_class", None)
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory, marker


@pytest.mark.parametrize("tokenizer_class", ["PreTrainedTokenizerFast", "TokenizersBackend", "GPT2TokenizerFast"])
def test_an_auto_map_beside_a_class_of_transformers_own_loads_that_class_and_runs_no_code(tmp_path, tokenizer_class):
    directory, marker = tokenizer_with_code(tmp_path, tokenizer_class)
    check_tokenizer_files(directory)
    for tokenizer in (load_tokenizer(directory), AutoTokenizer.from_pretrained(directory, local_files_only=True)):
        assert type(tokenizer).__module__.startswith("transformers.")
        assert tokenizer("ab", add_special_tokens=False)["input_ids"] == [ord("a") + 2, ord("b") + 2]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("tokenizer_class", "phrase"),
    [
        ("MineTokenizer", "its tokenizer_class 'MineTokenizer' is not one of transformers' tokenizers"),
        (None, "it names no tokenizer_class of one of transformers' tokenizers"),
        ("AutoTokenizer", "its tokenizer_class 'AutoTokenizer' is not one of transformers' tokenizers"),
        ("PreTrainedTokenizerBase", "'PreTrainedTokenizerBase' is not one of transformers' tokenizers"),
    ],
)
def test_an_auto_map_without_a_class_of_transformers_own_is_refused_in_one_line(tmp_path, tokenizer_class, phrase):
    """`AutoTokenizer` and `PreTrainedTokenizerBase` are transformers' names but no tokenizer it can load (a
    RecursionError, a NotImplementedError): named like any other class that is not one of its own."""
    directory, marker = tokenizer_with_code(tmp_path, tokenizer_class)
    for load in (check_tokenizer_files, load_tokenizer):
        with pytest.raises(ValueError) as info:
            load(directory)
        message = str(info.value)
        assert phrase in message and "no trust_remote_code" in message and "\n" not in message, message
        assert "set tokenizer_class to the transformers class it builds on" in message
    assert not marker.exists()
