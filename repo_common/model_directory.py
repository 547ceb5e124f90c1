"""What a local HF model directory must hold, checked before transformers reads it (stdlib only).

The project loads models and tokenizers from local directories only, offline,
and never runs code a directory ships (`trust_remote_code`). Without these
checks a missing path costs ~30 s of hub retries, a hub id ends in a network
traceback, a garbage config.json or tokenizer.json surfaces as a bare JSON or
codec message, and a tokenizer with its own code prints transformers' prompt to
pass `trust_remote_code`, an option no command here has.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

from repo_common.file_permissions import check_folder_readable
from repo_common.json_files import read_json_object

#: `org/name` (the hub's repository ids): not a local path unless such a directory exists.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: The tokenizer files whose JSON transformers reads.
TOKENIZER_JSON_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")
#: A directory holding none of these has no tokenizer AutoTokenizer could load.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


#: Folders the project's commands write models and runs into (`models/smollm2-135m-instruct`, `outputs/...`): a
#: path under one of them is local even where that folder is missing here, never a hub id.
LOCAL_FOLDERS = ("models", "outputs", "results", "scales", "checkpoints")


def looks_local(text: str) -> bool:
    """A path the user means as local: it starts with ./ ../ / or ~, its first component is a directory here, or
    it lies under one of the project's own folders (`LOCAL_FOLDERS`)."""
    if text.startswith(("./", "../", "/", "~")) or text in (".", ".."):
        return True
    first = text.split("/", 1)[0]
    return first in LOCAL_FOLDERS or Path(first).is_dir()


def looks_like_hub_id(text: str) -> bool:
    """`org/name` that is not an existing path and does not look local: what a user copies from a model's hub
    page (a misspelt `models/name` is a missing local directory, not a download)."""
    return bool(_HUB_ID.match(text)) and not looks_local(text) and not Path(text).expanduser().exists()


def nearest_existing(path: str | os.PathLike) -> Path | None:
    """The existing directory whose name is closest to the first missing component of `path` (difflib), with the
    rest of `path` below it when that exists too: what a misspelt path most likely meant; None if nothing is close."""
    parts = Path(path).expanduser().parts
    base = Path(parts[0]) if Path(path).expanduser().is_absolute() else Path()
    start = 1 if base != Path() else 0
    for index in range(start, len(parts)):
        if not (base / parts[index]).exists():
            break
        base = base / parts[index]
    else:
        return None
    try:
        names = [entry.name for entry in base.iterdir() if entry.is_dir()]
    except OSError:
        return None
    close = difflib.get_close_matches(parts[index], names, n=1, cutoff=0.6)
    if not close:
        return None
    guess = base / close[0]
    full = guess.joinpath(*parts[index + 1 :])
    return full if full.exists() else guess


def no_such_directory(text: str) -> str:
    """ "no such directory", with the nearest existing one a misspelling may have meant."""
    near = nearest_existing(text)
    return "no such directory" + (f" (did you mean {str(near)!r}?)" if near is not None else "")


def download_hint(text: str) -> str:
    name = text.rstrip("/").split("/")[-1]
    return (
        f"this project loads local model directories only (offline): download it first, e.g. "
        f"`hf download {text} --local-dir models/{name}` (huggingface_hub), then pass models/{name}"
    )


def missing_directory_message(option: str, path: str | os.PathLike) -> str:
    """One line for `option` naming a model directory that is not there (a hub id gets the download hint)."""
    text = str(path)
    if looks_like_hub_id(text):
        return f"{option} {text!r} is not a local directory; {download_hint(text)}"
    if Path(text).expanduser().is_file():
        return f"{option} {text!r} is a file; pass the model's directory (the folder save_pretrained wrote)"
    return (
        f"{option} {text!r}: {no_such_directory(text)}; pass a local HF model directory (the folder save_pretrained "
        "wrote)"
    )


def check_model_directory(option: str, path: str | os.PathLike) -> Path:
    """`path` as an existing directory whose files this user may read, or a FileNotFoundError from
    `missing_directory_message` (a PermissionError naming the folder or file it may not read)."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(missing_directory_message(option, path))
    check_folder_readable(directory)  # else transformers says "No such file" of unreadable weights
    return directory


def check_model_files(option: str, path: str | os.PathLike) -> dict[str, Any]:
    """The model directory `path` (given as `option`) holds a readable config.json and tokenizer files that ask
    for no code of their own; returns the config. Stdlib only, so a command refuses a half-copied model before it
    imports torch; every refusal is one line naming the file and the fix."""
    directory = check_model_directory(option, path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"{option} {str(path)!r} has no config.json; pass the directory written by model.save_pretrained(...)"
        )
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{option} {str(path)!r} has no tokenizer (none of {list(TOKENIZER_FILES)}); save one there with "
            "tokenizer.save_pretrained(DIR)"
        )
    config = read_model_config(directory)
    check_tokenizer_files(directory)
    return config


def read_model_config(directory: str | os.PathLike) -> dict[str, Any]:
    """config.json of a model directory as a dict; not JSON, binary or not an object: one line naming it (and
    a folder or file in it this user may not read: a PermissionError naming it)."""
    check_folder_readable(directory)
    path = Path(directory) / "config.json"
    return read_json_object(
        path,
        "a model's config.json (a JSON object of the model's settings)",
        "copy it again from where the model came from, or save the model again with save_pretrained",
    )


def is_builtin_tokenizer_class(name: str) -> bool:
    """transformers has a concrete tokenizer class `name` (or its Fast twin) of its own, found the way AutoTokenizer
    finds it (`tokenizer_class_from_name`): AutoTokenizer then loads that class, ignores the directory's auto_map
    and runs none of its code. `AutoTokenizer` or `PreTrainedTokenizerBase` are no such class (loading fails)."""
    from transformers import PreTrainedTokenizerBase  # heavy: only for a tokenizer whose auto_map names code
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name  # heavy: as above

    stem = name.removesuffix("Fast")
    for candidate in (stem, f"{stem}Fast"):
        found = tokenizer_class_from_name(candidate)
        if (
            isinstance(found, type)
            and found.__module__.startswith("transformers.")
            and issubclass(found, PreTrainedTokenizerBase)
            and found is not PreTrainedTokenizerBase
        ):
            return True
    return False


def check_tokenizer_files(directory: str | os.PathLike) -> None:
    """The tokenizer JSON files of `directory` are JSON objects, and none asks for the directory's own code.

    An `auto_map` (code the directory ships) is refused unless `tokenizer_class`
    is one of transformers' own tokenizers: AutoTokenizer then loads that class
    and ignores the auto_map, so no code runs either way (the policy: a model's
    code is never run). Otherwise the tokenizer could only load by running it.
    """
    directory = Path(directory)
    fix = "save the tokenizer again with tokenizer.save_pretrained(DIR), or copy it again"
    files = {}
    for name in TOKENIZER_JSON_FILES:
        if (directory / name).is_file():
            files[name] = read_json_object(directory / name, f"a tokenizer's {name} (a JSON object)", fix)
    config = files.get("tokenizer_config.json", {})
    auto_map = config.get("auto_map")
    if not auto_map:
        return
    names = auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else auto_map
    custom = [str(n) for n in (names if isinstance(names, list | tuple) else [names]) if n]
    tokenizer_class = str(config.get("tokenizer_class") or "")
    if custom and not (tokenizer_class and is_builtin_tokenizer_class(tokenizer_class)):
        which = (
            f"its tokenizer_class {tokenizer_class!r} is not" if tokenizer_class else "it names no tokenizer_class of"
        )
        raise ValueError(
            f"{directory / 'tokenizer_config.json'} asks for the directory's own tokenizer code (auto_map: "
            f"{', '.join(custom)}) and {which} one of transformers' tokenizers; this project never runs a model's "
            "code (no trust_remote_code): set tokenizer_class to the transformers class it builds on (e.g. "
            "PreTrainedTokenizerFast when tokenizer.json holds the whole tokenizer), which loads without that code "
            "(the auto_map is then ignored), or save a built-in tokenizer there with save_pretrained"
        )
