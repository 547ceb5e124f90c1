"""Which model paths are local (a missing one is named, with its nearest sibling) and which get the hub hint."""

from __future__ import annotations

import pytest

from repo_common.model_directory import looks_like_hub_id, missing_directory_message, nearest_existing


@pytest.mark.parametrize(
    ("text", "hub"),
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", True),
        ("allenai/OLMo-2-0425-1B", True),
        ("models/smollm2", False),  # the project's own folder, even where it is missing
        ("outputs/run", False),
        ("./org/name", False),
        ("../org/name", False),
        ("/org/name", False),
        ("~/name", False),
        ("mine/name", False),  # its first component is a folder here
        ("name", False),
    ],
)
def test_only_a_path_that_looks_like_a_hub_id_is_one(text, hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert looks_like_hub_id(text) is hub


def test_a_misspelt_local_path_is_no_such_directory_with_its_sibling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "smollm2-135m-instruct").mkdir(parents=True)
    message = missing_directory_message("--model", "models/smollm2-135m")
    assert message.startswith("--model 'models/smollm2-135m': no such directory (did you mean ")
    assert "'models/smollm2-135m-instruct'?" in message and "hf download" not in message
    # a misspelt folder above the model: the sibling with the rest of the path, where that exists
    assert str(nearest_existing("modles/smollm2-135m-instruct")) == "models/smollm2-135m-instruct"
    assert nearest_existing(tmp_path / "models" / "gpt-neox") is None  # nothing close: no guess
    assert "no such directory; pass" in missing_directory_message("--model", "models/gpt-neox")
