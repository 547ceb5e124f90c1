"""`python -m repo_train export`: a training checkpoint -> an HF model directory.

Reads a Lightning `.ckpt` file or a DeepSpeed ZeRO checkpoint directory (its
partitioned shards are merged to fp32 by DeepSpeed's own zero_to_fp32 code),
rebuilds `RePoOlmo2ForCausalLM` from the model config stored in the
checkpoint, and writes `save_pretrained` output that
`AutoModelForCausalLM.from_pretrained` loads after `import repo_train`. The
export is also how a ZeRO run moves to another number of processes.

Checkpoints are read by `repo_train.checkpoints` (`torch.load(weights_only=True)`,
also inside DeepSpeed's shard merging): a crafted `.ckpt` cannot run code, and
files that are not checkpoints end in one line naming the problem.

The tokenizer goes next to the weights, so the export can be evaluated as it
is: `--tokenizer DIR` if given, else the one the run used, read from the
checkpoint (the training data's `tokenizer`, else the `init_from` model's
tokenizer files); a hub name is taken from the local Hugging Face cache, never
downloaded here; `byte` names the built-in byte tokenizer (the tiny configs'
data, `SyntheticTextData`, uses it), whose files are written here. The tokenizer
must load and fit the model's vocabulary. A run on synthetic token ids
(`SyntheticData`) has none; `--no_tokenizer` exports the weights alone.

`--out` is written atomically (`repo_common.atomic.atomic_directory`): built in
a hidden staging directory next to it, moved into place complete, with the
umask's permissions; nothing is left behind on failure. An existing `--out`
is replaced only if it is an earlier export (it holds the `export.json` an
export writes: checkpoint, dtype, tokenizer); a file, a link or any other
non-empty directory there (another model's HF directory, an export made before
export.json existed) is refused before anything is read or written.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from repo_common.atomic import atomic_directory
from repo_common.cli_errors import first_line
from repo_common.model_directory import check_tokenizer_files, looks_like_hub_id, no_such_directory
from repo_train.byte_tokenizer import byte_tokenizer, names_byte_tokenizer
from repo_train.checkpoints import load_lightning_checkpoint, training_progress
from repo_train.data import saved_source_options
from repo_train.data.text import tokenizer_vocab_size
from repo_train.export_directory import EXPORT_MANIFEST, check_out
from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
)


def run_tokenizer(state: dict) -> tuple[str, str] | None:
    """(location, where it was found) of the tokenizer the checkpoint's run used, or None (synthetic ids)."""

    data = state.get("datamodule_hyper_parameters") or {}
    train = saved_source_options(data.get("train") if isinstance(data, dict) else None)
    if train.get("tokenizer"):
        return str(train["tokenizer"]), "data.train.tokenizer"
    model = state.get("hyper_parameters") or {}
    init_from = model.get("init_from") if isinstance(model, dict) else None
    if init_from and any((Path(init_from) / name).is_file() for name in TOKENIZER_FILES):
        return str(init_from), "model.init_from"
    return None


def _load_tokenizer(location: str, what: str, vocab_size: int):
    """(files to copy, or a tokenizer object to save): refuses a tokenizer that is not there, does not load, or
    does not fit the model. A local directory's files are copied as they are; `byte` (the built-in byte tokenizer,
    which the tiny configs train with) and a hub name (a run whose data named one, loaded from the Hugging Face
    cache) are saved with save_pretrained."""

    if names_byte_tokenizer(location):
        _check_fits(byte_tokenizer(), location, what, vocab_size)
        return [], byte_tokenizer()
    directory = Path(location).expanduser()
    local = directory.exists()
    hub_name = not local and looks_like_hub_id(location)  # `models/tok` is a missing folder, not a hub name
    if not local and not hub_name:
        raise FileNotFoundError(
            f"the tokenizer {what} {location!r}: {no_such_directory(location)}; pass --tokenizer DIR (a directory "
            "with tokenizer.json), or --no_tokenizer to export the weights alone"
        )
    files = [directory / name for name in TOKENIZER_FILES if (directory / name).is_file()]
    if local and not files:
        raise FileNotFoundError(
            f"the tokenizer {what} {location!r} has none of {', '.join(TOKENIZER_FILES[:2])}, ...: pass --tokenizer "
            "DIR (a directory with tokenizer.json), or --no_tokenizer to export the weights alone"
        )
    if local:
        check_tokenizer_files(directory)  # garbage JSON or the directory's own code: one line naming the file
    try:
        # a hub name from the Hugging Face cache only (where training put it): no network access while exporting
        tokenizer = AutoTokenizer.from_pretrained(str(directory) if local else location, local_files_only=True)
    except Exception as err:  # not cached, a damaged tokenizer.json: name it, export nothing
        detail = first_line(err, 160)
        state = "does not load" if local else "is not a directory here nor a hub tokenizer in the local cache"
        raise FileNotFoundError(
            f"the tokenizer {what} {location!r} {state} ({detail}): pass --tokenizer DIR (a directory with "
            "tokenizer.json), or --no_tokenizer to export the weights alone"
        ) from err
    _check_fits(tokenizer, location, what, vocab_size)
    return (files, None) if local else ([], tokenizer)


def _check_fits(tokenizer, location: str, what: str, vocab_size: int) -> None:
    """A tokenizer with ids the model has no embedding for is another model's: refused, naming both sizes."""
    size = tokenizer_vocab_size(tokenizer)
    if size > vocab_size:
        raise ValueError(
            f"the tokenizer {what} {location!r} has ids up to {size - 1} but the model's vocab_size is {vocab_size}: "
            "it is not this model's tokenizer; pass --tokenizer DIR with the run's own"
        )


def export_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    tokenizer: str | Path | None = None,
    dtype: str = "float32",
    *,
    with_tokenizer: bool = True,
):
    """Write the HF directory; returns the model that was saved (its `.tokenizer_source` says what went with it).

    `tokenizer` None takes the run's own (see the module doc); `with_tokenizer=False` writes the weights alone.
    """

    checkpoint = Path(checkpoint)
    out = check_out(out)
    state = load_lightning_checkpoint(checkpoint)  # also: a missing path, a damaged file, one line each
    if "model_config" not in state:
        raise ValueError(f"{checkpoint} has no 'model_config': it was not written by repo_train's training module")
    config = RePoOlmo2Config.from_dict(state["model_config"])
    tokenizer_files, tokenizer_object, source = [], None, None
    if tokenizer is not None:
        source = (str(tokenizer), "--tokenizer")
    elif with_tokenizer:
        source = run_tokenizer(state)
    if source is not None:
        tokenizer_files, tokenizer_object = _load_tokenizer(source[0], source[1], config.vocab_size)
    model = RePoOlmo2ForCausalLM(config)
    weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ValueError(
            f"{checkpoint}: its weights do not match its model config: {len(missing)} missing "
            f"({', '.join(missing[:3])}), {len(unexpected)} unexpected ({', '.join(unexpected[:3])})"
        )
    model = model.to(getattr(torch, dtype))
    try:
        with atomic_directory(out) as staging:  # complete or not at all; no staging directory left behind
            model.save_pretrained(staging)
            for file in tokenizer_files:
                shutil.copyfile(file, staging / file.name)
            if tokenizer_object is not None:
                tokenizer_object.save_pretrained(staging)
            manifest = {
                "written_by": "python -m repo_train export",
                "checkpoint": str(checkpoint.resolve()),
                "dtype": dtype,
                "tokenizer": None if source is None else {"location": source[0], "from": source[1]},
                "training": training_progress(state),
            }
            (staging / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    except OSError as err:  # read-only place, disk full: the path and the reason
        raise ValueError(
            f"cannot write the export to {out} ({err.strerror or type(err).__name__}"
            f"{': ' + str(err.filename) if err.filename else ''}): pass a writable --out with free space"
        ) from err
    model.tokenizer_source = source
    model.training_progress = manifest["training"]
    return model


def unfinished_line(progress: dict) -> str:
    """The warning of an export whose weights are not those of a finished run (export.json's `training`)."""
    total = f" of {progress['total_steps']}" if progress["total_steps"] else ""
    at = f"step {progress['step']}{total}"
    if progress["status"] == "interrupted":
        what = f"the run was interrupted ({progress['interrupted'].get('signal')}) at {at}"
    elif progress["status"] == "unfinished":
        what = f"the checkpoint is from {at}, before the run's end"
    else:
        what = f"the checkpoint (step {progress['step']}) does not record the run's total steps"
    return f"[export] note: {what}; export.json records it (training.status = {progress['status']!r})"


def run(args, _parser=None) -> int:
    """The `export` command, once `repo_train.cli` has parsed and checked its options."""
    model = export_checkpoint(
        args.checkpoint, args.out, args.tokenizer, args.dtype, with_tokenizer=not args.no_tokenizer
    )
    progress = model.training_progress
    if progress["status"] != "finished":
        print(unfinished_line(progress), file=sys.stderr)
    if model.tokenizer_source is not None:
        location, what = model.tokenizer_source
        print(f"[export] wrote {args.out} (weights, and the tokenizer of {what}: {location})")
    elif args.no_tokenizer:
        print(f"[export] wrote {args.out} (weights only, as asked)")
    else:
        print(
            f"[export] wrote {args.out} (weights only: the checkpoint names no tokenizer, as for a run on synthetic "
            "ids; add the run's own with --tokenizer DIR before evaluating it, or train on SyntheticTextData, whose "
            "tokenizer goes along)"
        )
    return 0
