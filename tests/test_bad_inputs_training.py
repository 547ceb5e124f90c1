"""Bad inputs to `python -m repo_train` (fit, export) are refused in one line and leave files as they were.

`ROWS` is the training and export part of the bad-input table (issue 13; the
row and the check are in tests/bad_input_helpers.py): parser errors, data
sources and files, the root dir, checkpoints, init_from, export's output and
tokenizer. Below the table: the Python-API checks that are not command lines
(the training `init_from` load, export's weights-only reads).
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_helpers import (
    ALIAS_BOMB,
    HUB_ID,
    BadInput,
    Context,
    check_row,
    config_only,
    denying,
    edited_model,
    file_at,
    garbage,
    lightning_like,
    llama_as_olmo2,
    repo_model,
    row_params,
    tiny_fields,
    tokenizer_with_own_code,
    tree_bytes,
    with_tokenizer,
)

from repo_common.cli_errors import EXIT_USAGE
from repo_common.run_lock import LOCK_FILE
from repo_train.data import DataSource, OlmoNumpyData, PromptCompletionData, SyntheticData, TextData
from repo_train.data.olmo_numpy import read_mix_file
from repo_train.data.text import load_tokenizer
from repo_train.training.checks import check_init_from


class Evil:
    """Unpickling this creates the file named by `target` (what a crafted checkpoint could do)."""

    def __init__(self, target: Path):
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def zero_dir_with(tmp: Path, payload) -> Path:
    """A DeepSpeed ZeRO checkpoint directory layout whose model and optimizer shards are `payload`."""
    path = tmp / "zero.ckpt"
    (path / "checkpoint").mkdir(parents=True)
    (path / "latest").write_text("checkpoint")
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"):
        torch.save(payload, path / "checkpoint" / name)
    return path


def _export(make: Callable[[Context], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: ["export", "--checkpoint", str(make(ctx)), "--out", str(ctx.tmp / "hf")]


def _bytes(name: str, data: bytes) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        (ctx.tmp / name).write_bytes(data)
        return ctx.tmp / name

    return make


def _truncated(ctx: Context) -> Path:
    whole = lightning_like(ctx.tmp / "whole.ckpt").read_bytes()
    (ctx.tmp / "cut.ckpt").write_bytes(whole[: len(whole) // 2])
    return ctx.tmp / "cut.ckpt"


def _saved(name: str, obj) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        payload = obj(ctx) if callable(obj) else obj
        torch.save(payload, ctx.tmp / name)
        return ctx.tmp / name

    return make


def _locked_training(ctx: Context) -> list[str]:
    root = ctx.tmp / "run"
    root.mkdir()
    (root / "earlier.txt").write_text("an earlier run's file\n")
    ctx.hold(root / LOCK_FILE)
    return ["fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(root)]


def _init_from(model: Callable[[Path], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: [
        "fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(ctx.tmp / "run"),
        "--model.init_from", str(model(ctx.tmp)),
    ]  # fmt: skip


def _gpt2_dir(tmp: Path) -> Path:
    return config_only(tmp, "gpt2", model_type="gpt2", n_embd=64, n_layer=2)


FIT = ["fit", "--trainer.max_steps", "1"]


def _fit(*args: str) -> Callable[[Context], list[str]]:
    """The fast `fit` of the tiny default under ctx.tmp/run; `{tmp}` in an argument is replaced by ctx.tmp."""
    return lambda ctx: (
        [*FIT, "--trainer.default_root_dir", str(ctx.tmp / "run")]
        + [arg.replace("{tmp}", str(ctx.tmp)) for arg in args]
    )


def _fit_with(make: Callable[[Context], list[str]]) -> Callable[[Context], list[str]]:
    """`fit` plus the arguments `make` returns after building its files under ctx.tmp."""
    return lambda ctx: [*FIT, "--trainer.default_root_dir", str(ctx.tmp / "run"), *make(ctx)]


def _data(
    source: type[DataSource], file: Callable[[Context], Path] | None = None, **options
) -> Callable[[Context], list[str]]:
    """`--data.train` of one source reading `file` (text sources get the byte tokenizer saved under ctx.tmp)."""

    def make(ctx: Context) -> list[str]:
        train = dict(options)
        if file is not None:
            train["mix_file" if source is OlmoNumpyData else "paths"] = (
                str(file(ctx)) if source is OlmoNumpyData else [str(file(ctx))]
            )
        if source in (TextData, PromptCompletionData):
            train["tokenizer"] = str(with_tokenizer(ctx.tmp / "tokenizer"))
        return ["--data.train", json.dumps(source(**train).to_config())]

    return make


def _numpy_mix(shard: bytes | None) -> Callable[[Context], Path]:
    """A mix file listing shard.npy, which holds `shard` (None: the shard is not there)."""

    def make(ctx: Context) -> Path:
        if shard is not None:
            (ctx.tmp / "shard.npy").write_bytes(shard)
        (ctx.tmp / "mix.txt").write_text("shard.npy\n")
        return ctx.tmp / "mix.txt"

    return make


NUMPY = {"seq_len": 16, "vocab_size": 256, "eos_token_id": 1, "pad_token_id": 0, "check_token_ids": False}


def _unwritable(ctx: Context, name: str) -> Path:
    """A path no file can be created at: under a 0o555 directory, or (root ignores modes) under sysfs."""
    if os.geteuid() != 0:
        parent = ctx.tmp / "read-only"
        parent.mkdir()
        parent.chmod(0o555)
        return parent / name
    return Path("/sys/fs/repo-train-bad-input") / name


SAVED_MODEL = {"init_from": None, "preset_name": "tiny", "position_method": "repo", "lr": 0.01}


SAVED_DATA = {"train": SyntheticData(seq_len=32).to_config(), "global_batch_size": 16, "micro_batch_size": 4}


def _run_checkpoint(ctx: Context, model: dict | None = None, data: dict | None = None, weights: bool = True) -> Path:
    """A .ckpt as `fit` writes it: tiny model weights, model_config and both modules' hyperparameters."""
    state = torch.load(lightning_like(ctx.tmp / "base.ckpt"), weights_only=True) if weights else {"state_dict": {}}
    (ctx.tmp / "base.ckpt").unlink(missing_ok=True)
    state["hyper_parameters"] = {**SAVED_MODEL, **(model or {}), "_instantiator": "pytorch_lightning.cli.x"}
    state["datamodule_hyper_parameters"] = {**SAVED_DATA, **(data or {})}
    torch.save(state, ctx.tmp / "run.ckpt")
    return ctx.tmp / "run.ckpt"


def _resume(*args: str, model: dict | None = None, data: dict | None = None) -> Callable[[Context], list[str]]:
    """`fit --ckpt_path` of a checkpoint saved with SAVED_MODEL/SAVED_DATA (+ changes), with `args` given."""
    return _fit_with(lambda ctx: ["--ckpt_path", str(_run_checkpoint(ctx, model, data, weights=False)), *args])


def _ckpt(make: Callable[[Context], Path]) -> Callable[[Context], list[str]]:
    return _fit_with(lambda ctx: ["--ckpt_path", str(make(ctx))])


def _zero_without(*names: str) -> Callable[[Context], Path]:
    """A ZeRO checkpoint directory (tiny shards) missing `names` (relative paths inside it)."""

    def make(ctx: Context) -> Path:
        path = zero_dir_with(ctx.tmp, {"optimizer_state_dict": {"zero_stage": 2}})
        for name in names:
            (path / name).unlink()
        return path

    return make


def _init_dir(ctx: Context, weights: str | None, shards: list[str] = ()) -> Path:
    """An OLMo-2 config.json with only `weights` (a file name) or an index naming `shards` that are absent."""
    path = ctx.tmp / "base"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "olmo2", **tiny_fields()}))
    if weights is not None:
        index = {"metadata": {}, "weight_map": {f"w{i}": shard for i, shard in enumerate(shards)}}
        (path / weights).write_text(json.dumps(index))
    return path


def _export_to(out: Callable[[Context], Path], checkpoint=lambda ctx: lightning_like(ctx.tmp / "run.ckpt"), *extra):
    return lambda ctx: ["export", "--checkpoint", str(checkpoint(ctx)), "--out", str(out(ctx)), *extra]


def _dir_with_file(ctx: Context) -> Path:
    (ctx.tmp / "results").mkdir()
    (ctx.tmp / "results" / "notes.txt").write_text("not a model\n")
    return ctx.tmp / "results"


def _run_tokenizer_checkpoint(tokenizer: Callable[[Context], Path]) -> Callable[[Context], Path]:
    """A checkpoint whose run read text with the tokenizer `tokenizer(ctx)` (what export takes by default).

    Its data is the `source:` dict of checkpoints written before data sources were classes."""

    def make(ctx: Context) -> Path:
        data = {"train": {"source": "text", "tokenizer": str(tokenizer(ctx)), "paths": ["a.txt"], "seq_len": 16}}
        return _run_checkpoint(ctx, data=data)

    return make


def _big_tokenizer(ctx: Context) -> Path:
    """A tokenizer with more ids (258) than the tiny model's 256 embeddings: not this model's."""
    return with_tokenizer(ctx.tmp / "big_tokenizer")


def _tokenizer_dir(edit: Callable[[Path], None]) -> Callable[[Context], str]:
    """The byte tokenizer saved under ctx.tmp/tokenizer, then `edit(directory)`."""

    def make(ctx: Context) -> str:
        path = with_tokenizer(ctx.tmp / "tokenizer")
        edit(path)
        return str(path)

    return make


def _export_tokenizer(edit: Callable[[Path], None]) -> Callable[[Context], list[str]]:
    """`export --tokenizer` of the byte tokenizer saved under ctx.tmp/tokenizer, then `edit`ed."""

    def make(ctx: Context) -> list[str]:
        checkpoint = lightning_like(ctx.tmp / "run.ckpt")
        tokenizer = _tokenizer_dir(edit)(ctx)
        return ["export", "--checkpoint", str(checkpoint), "--out", str(ctx.tmp / "hf"), "--tokenizer", tokenizer]

    return make


def _shard_as_mix_file(size: int | None) -> Callable[[Context], Path]:
    """A token shard (.npy) passed as the mix file; `size`: made that large (sparse), like a real shard."""

    def make(ctx: Context) -> Path:
        path = ctx.tmp / "part-000.npy"
        np.save(path, np.arange(64, dtype=np.uint16))
        if size is not None:
            os.truncate(path, size)
        return path

    return make


# == setups: insert above this line ==


ROWS = [
    # -- another architecture's config.json (item 1): training init_from refuses before writing anything
    BadInput(
        "fit-init-from-gpt2", "repo_train", _init_from(_gpt2_dir), EXIT_USAGE, "config.json has model_type 'gpt2'"
    ),
    BadInput(
        "fit-init-from-no-model-type",
        "repo_train",
        _init_from(lambda tmp: config_only(tmp, "typeless", hidden_size=64)),
        EXIT_USAGE,
        "config.json has no model_type",
    ),
    # -- Lightning's own checks and settings that lose resumability: one line, nothing written (Robust II)
    BadInput("fit-max-steps-negative", "repo_train", _fit("--trainer.max_steps", "-5"), EXIT_USAGE, "`max_steps` must"),
    BadInput(
        "fit-gpu-without-cuda",
        "repo_train",
        _fit("--trainer.accelerator", "gpu"),
        EXIT_USAGE,
        "the trainer refused these settings",
    ),
    BadInput(
        "fit-checkpoint-every-0",
        "repo_train",
        _fit("--checkpoint.every_n_train_steps", "0"),
        EXIT_USAGE,
        "every_n_train_steps must be >= 1",
    ),
    BadInput(
        "fit-old-curriculum-key",
        "repo_train",
        _fit("--model.repo_curriculum_steps", "10"),
        EXIT_USAGE,
        "write model.position: {class_path: RepoPosition, init_args: {curriculum_steps: 10}}",
    ),
    # -- a demo the tiny model's context cannot hold: refused at once, not run for hours (Robust II)
    BadInput(
        "demo-huge-seed",
        "repo_train",
        lambda ctx: ["demo", "--seed", "100000000000000000000000"],
        EXIT_USAGE,
        "seed in [0, 2**32)",
    ),
    BadInput("demo-huge-seq-len", "repo_train", lambda ctx: ["demo", "--seq_len", "10000000"], EXIT_USAGE, "8 to 2048"),
    BadInput(
        "demo-huge-new-tokens",
        "repo_train",
        lambda ctx: ["demo", "--new_tokens", "100000000"],
        EXIT_USAGE,
        "ask for at most 2012",
    ),
    # -- one writer per output (item 3)
    BadInput("fit-root-locked", "repo_train", _locked_training, EXIT_USAGE, "training root dir"),
    # -- checkpoints export reads (item 6)
    BadInput(
        "export-crafted-pickle",
        "repo_train",
        _export(_saved("evil.ckpt", lambda ctx: {"state_dict": {}, "x": Evil(ctx.tmp / "pwned")})),
        EXIT_USAGE,
        "refused to unpickle",
        absent="pwned",
    ),
    BadInput(
        "export-random-bytes",
        "repo_train",
        _export(_bytes("r.ckpt", random.Random(0).randbytes(4096))),
        EXIT_USAGE,
        "not a readable",
    ),
    BadInput("export-empty-file", "repo_train", _export(_bytes("e.ckpt", b"")), EXIT_USAGE, "empty file"),
    BadInput("export-truncated", "repo_train", _export(_truncated), EXIT_USAGE, "not a readable PyTorch checkpoint"),
    BadInput(
        "export-not-a-dict",
        "repo_train",
        _export(_saved("l.ckpt", [1, 2])),
        EXIT_USAGE,
        "holds no Lightning state_dict",
    ),
    BadInput(
        "export-no-model-config",
        "repo_train",
        _export(_saved("n.ckpt", {"state_dict": {}})),
        EXIT_USAGE,
        "has no 'model_config'",
    ),
    # -- training: parser errors are one line (not LightningCLI's ~90-line usage)
    BadInput("fit-unknown-option", "repo_train", _fit("--model.no_such_key", "1"), EXIT_USAGE, "--model.no_such_key"),
    BadInput(
        "fit-max-steps-not-int", "repo_train", _fit("--trainer.max_steps", "abc"), EXIT_USAGE, "'abc' is not valid"
    ),
    BadInput(
        "fit-config-not-a-mapping",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(file_at("list.yaml", "- model\n- data\n")(ctx))]),
        EXIT_USAGE,
        "the config is not a YAML mapping",
    ),
    BadInput(
        "fit-config-missing", "repo_train", _fit("--config", "{tmp}/nowhere.yaml"), EXIT_USAGE, "File does not exist"
    ),
    BadInput(
        "fit-config-alias-bomb",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(file_at("bomb.yaml", ALIAS_BOMB)(ctx))]),
        EXIT_USAGE,
        "expands to more than 100,000 values",
    ),
    BadInput(
        "fit-config-broken-yaml",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(file_at("broken.yaml", "model: {lr: [\n")(ctx))]),
        EXIT_USAGE,
        "the config is not valid YAML",
    ),
    BadInput(
        "fit-config-unknown-key",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(file_at("typo.yaml", "model:\n  learning_rate: 0.1\n")(ctx))]),
        EXIT_USAGE,
        "does not accept option 'model.learning_rate'",
    ),
    # -- training: data sources are classes (class_path + init_args); the old `source:` dicts name their replacement
    BadInput(
        "fit-data-old-source-dict",
        "repo_train",
        _fit("--data.train", '{"source": "synthetic", "seq_len": 16}'),
        EXIT_USAGE,
        "data.train: the 'source:' form was replaced by class_path + init_args; write {class_path: "
        "repo_train.data.SyntheticData, init_args: {seq_len: 16}}",
    ),
    BadInput(
        "fit-data-old-source-in-config",
        "repo_train",
        _fit_with(
            lambda ctx: ["--config", str(file_at("old.yaml", "data:\n  val: {source: text, seq_len: 8}\n")(ctx))]
        ),
        EXIT_USAGE,
        "data.val: the 'source:' form was replaced by class_path + init_args; write {class_path: "
        "repo_train.data.TextData, init_args: {seq_len: 8}}",
    ),
    BadInput(
        "fit-data-not-a-source",
        "repo_train",
        _fit("--data.train", "WikiData"),
        EXIT_USAGE,
        "--data.train: 'WikiData' is not a data source; name one of SyntheticData, OlmoNumpyData",
    ),
    BadInput(
        "fit-data-unknown-option",
        "repo_train",
        _fit("--data.train", "SyntheticData", "--data.train.seqlen", "16"),
        EXIT_USAGE,
        "--data.train: SyntheticData has no option 'seqlen'; its options are num_samples, seq_len,",
    ),
    BadInput(
        "fit-data-option-not-int",
        "repo_train",
        _fit("--data.train", "SyntheticData", "--data.train.seq_len", "long"),
        EXIT_USAGE,
        "--data.train.seq_len: 'long' is not valid for SyntheticData (expected int)",
    ),
    BadInput(
        "fit-data-option-without-class",
        "repo_train",
        _fit("--data.train.seq_len", "16"),
        EXIT_USAGE,
        "--data.train.seq_len needs the source's class first (no config names one): e.g. --data.train SyntheticData",
    ),
    # -- training: model and batch settings
    BadInput(
        "fit-unknown-position-method",
        "repo_train",
        _fit("--model.position", "alibi"),
        EXIT_USAGE,
        "model.position: unknown position method 'alibi'",
    ),
    BadInput(
        "fit-old-position-method-key",
        "repo_train",
        _fit("--model.position_method", "r2n1"),
        EXIT_USAGE,
        "model.position_method moved: the position method and its options are one option now; write --model.position r2n1",
    ),
    BadInput(
        "fit-position-class-not-a-position",
        "repo_train",
        _fit("--model.position", "{class_path: SyntheticData}"),
        EXIT_USAGE,
        "is not a position config; name one of",
    ),
    BadInput(
        "fit-position-unknown-option",
        "repo_train",
        _fit("--model.position", "RepoPosition", "--model.position.curriculum", "1"),
        EXIT_USAGE,
        "RepoPosition has no option 'curriculum'",
    ),
    BadInput(
        "fit-position-option-without-class",
        "repo_train",
        _fit("--model.position.start_layer", "2"),
        EXIT_USAGE,
        "--model.position.start_layer needs the position's class first",
    ),
    BadInput(
        "fit-position-start-layer-past-the-model",
        "repo_train",
        _fit("--model.position", "RepoPosition", "--model.position.start_layer", "9"),
        EXIT_USAGE,
        "repo_start_layer must be an integer in [0, 3]",
    ),
    BadInput(
        "fit-batch-not-divisible",
        "repo_train",
        _fit("--data.global_batch_size", "10", "--data.micro_batch_size", "4"),
        EXIT_USAGE,
        "global_batch_size=10 is not divisible by micro_batch_size",
    ),
    # -- training: the root dir
    BadInput(
        "fit-root-is-a-file",
        "repo_train",
        lambda ctx: [*FIT, "--trainer.default_root_dir", str(file_at("root", "a file\n")(ctx))],
        EXIT_USAGE,
        "is a file, not a directory",
    ),
    BadInput(
        "fit-root-unwritable",
        "repo_train",
        lambda ctx: [*FIT, "--trainer.default_root_dir", str(_unwritable(ctx, "run"))],
        EXIT_USAGE,
        "cannot be written",
    ),
    # -- training: --ckpt_path that is not a readable checkpoint (read weights-only, as export does)
    BadInput("fit-ckpt-missing", "repo_train", _fit("--ckpt_path", "{tmp}/no.ckpt"), EXIT_USAGE, "does not exist"),
    BadInput(
        "fit-ckpt-random-bytes",
        "repo_train",
        _ckpt(_bytes("r.ckpt", random.Random(1).randbytes(4096))),
        EXIT_USAGE,
        "not a readable PyTorch checkpoint",
    ),
    BadInput("fit-ckpt-truncated", "repo_train", _ckpt(_truncated), EXIT_USAGE, "truncated"),
    BadInput("fit-ckpt-empty", "repo_train", _ckpt(_bytes("e.ckpt", b"")), EXIT_USAGE, "empty file"),
    BadInput(
        "fit-ckpt-crafted-pickle",
        "repo_train",
        _ckpt(_saved("evil.ckpt", lambda ctx: {"state_dict": {}, "x": Evil(ctx.tmp / "pwned")})),
        EXIT_USAGE,
        "refused to unpickle",
        absent="pwned",
    ),
    BadInput(
        "fit-ckpt-zero-incomplete",
        "repo_train",
        _ckpt(_zero_without("checkpoint/mp_rank_00_model_states.pt")),
        EXIT_USAGE,
        "incomplete DeepSpeed ZeRO checkpoint",
    ),
    # -- training: given values that differ from the resumed checkpoint's (issue 13, item 7)
    BadInput(
        "fit-ckpt-other-lr",
        "repo_train",
        _resume("--model.lr", "0.1"),
        EXIT_USAGE,
        "model.lr = 0.01 in the checkpoint, 0.1 given",
    ),
    BadInput(
        "fit-ckpt-other-position-method",
        "repo_train",
        _resume("--model.position", "rope", "--allow_hparam_changes", "true"),
        EXIT_USAGE,
        "depend on: model.position = {'class_path': 'repo_train.modeling.repo_policy.RepoPosition'",
    ),
    BadInput(
        "fit-ckpt-other-data",
        "repo_train",
        _resume("--data.micro_batch_size", "2"),
        EXIT_USAGE,
        "data.micro_batch_size = 4 in the checkpoint, 2 given",
    ),
    # -- training: init_from that is not a whole OLMo-2 directory
    BadInput(
        "fit-init-from-missing-dir",
        "repo_train",
        _fit("--model.init_from", "{tmp}/nowhere"),
        EXIT_USAGE,
        "nowhere' is not an HF model directory: no such directory",
    ),
    BadInput(
        "fit-init-from-no-weights",
        "repo_train",
        _fit_with(lambda ctx: ["--model.init_from", str(_init_dir(ctx, None))]),
        EXIT_USAGE,
        "has a config.json but no weights",
    ),
    BadInput(
        "fit-init-from-missing-shard",
        "repo_train",
        _fit_with(
            lambda ctx: [
                "--model.init_from",
                str(
                    _init_dir(
                        ctx, "model.safetensors.index.json", ["model-1-of-2.safetensors", "model-2-of-2.safetensors"]
                    )
                ),
            ]
        ),
        EXIT_USAGE,
        "2 of the 2 weight shards",
    ),
    # -- training: data files (named with file and line)
    BadInput(
        "fit-text-jsonl-empty",
        "repo_train",
        _fit_with(_data(TextData, file_at("docs.jsonl", ""), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl' is empty",
    ),
    BadInput(
        "fit-text-jsonl-broken-line",
        "repo_train",
        _fit_with(_data(TextData, file_at("docs.jsonl", '{"text": "a b"}\n{"text": "c\n'), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl:2 is not valid JSON",
    ),
    BadInput(
        "fit-text-jsonl-not-an-object",
        "repo_train",
        _fit_with(_data(TextData, file_at("docs.jsonl", '{"text": "a b"}\n["a", "b"]\n'), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl:2 holds a JSON list, not an object",
    ),
    BadInput(
        "fit-text-txt-empty",
        "repo_train",
        _fit_with(_data(TextData, file_at("docs.txt", ""), seq_len=16)),
        EXIT_USAGE,
        "docs.txt' is empty",
    ),
    BadInput(
        "fit-text-txt-not-utf8",
        "repo_train",
        _fit_with(_data(TextData, file_at("docs.txt", b"one line\n\xff\xfe binary\n"), seq_len=16)),
        EXIT_USAGE,
        "docs.txt:2 is not UTF-8 text",
    ),
    BadInput(
        "fit-prompt-completion-broken-line",
        "repo_train",
        _fit_with(
            _data(PromptCompletionData, file_at("pc.jsonl", '{"prompt": "a", "completion": "b"}\n{"prompt": "a"\n'))
        ),
        EXIT_USAGE,
        "pc.jsonl:2 is not valid JSON",
    ),
    BadInput(
        "fit-prompt-completion-empty",
        "repo_train",
        _fit_with(_data(PromptCompletionData, file_at("pc.jsonl", "\n"))),
        EXIT_USAGE,
        "no prompt/completion examples",
    ),
    BadInput(
        "fit-prompt-completion-not-utf8",
        "repo_train",
        _fit_with(_data(PromptCompletionData, file_at("pc.jsonl", b'{"prompt": "a", "completion": "\xff"}\n'))),
        EXIT_USAGE,
        "pc.jsonl:1 is not UTF-8 text",
    ),
    BadInput(
        "fit-olmo-numpy-no-mix-file",
        "repo_train",
        _fit_with(_data(OlmoNumpyData, lambda ctx: ctx.tmp / "nowhere.txt", **NUMPY)),
        EXIT_USAGE,
        "nowhere.txt' does not exist",
    ),
    BadInput(
        "fit-olmo-numpy-missing-shard",
        "repo_train",
        _fit_with(_data(OlmoNumpyData, _numpy_mix(None), **NUMPY)),
        EXIT_USAGE,
        "shard.npy' does not exist",
    ),
    BadInput(
        "fit-olmo-numpy-empty-shard",
        "repo_train",
        _fit_with(_data(OlmoNumpyData, _numpy_mix(b""), **NUMPY)),
        EXIT_USAGE,
        "shard.npy' is empty",
    ),
    # -- export: where it writes (atomically: no staging directory is left behind)
    BadInput(
        "export-out-is-a-file",
        "repo_train",
        _export_to(file_at("hf", "a file\n")),
        EXIT_USAGE,
        "is a file, not a directory",
    ),
    BadInput(
        "export-out-unwritable",
        "repo_train",
        _export_to(lambda ctx: _unwritable(ctx, "hf")),
        EXIT_USAGE,
        "cannot write the export to",
    ),
    BadInput(
        "export-out-not-an-export",
        "repo_train",
        _export_to(_dir_with_file),
        EXIT_USAGE,
        "is a non-empty directory that this command did not write (notes.txt; has no export.json",
    ),
    # -- export: checkpoints that are not there or not whole
    BadInput(
        "export-checkpoint-missing",
        "repo_train",
        _export_to(lambda ctx: ctx.tmp / "hf", lambda ctx: ctx.tmp / "no.ckpt"),
        EXIT_USAGE,
        "no.ckpt does not exist",
    ),
    BadInput(
        "export-zero-no-latest",
        "repo_train",
        _export(_zero_without("latest")),
        EXIT_USAGE,
        "not a DeepSpeed ZeRO checkpoint (no 'latest' file",
    ),
    BadInput(
        "export-zero-no-model-states",
        "repo_train",
        _export(_zero_without("checkpoint/mp_rank_00_model_states.pt")),
        EXIT_USAGE,
        "without mp_rank_00_model_states.pt",
    ),
    BadInput(
        "export-zero-no-optimizer-shards",
        "repo_train",
        _export(_zero_without("checkpoint/zero_pp_rank_0_mp_rank_00_optim_states.pt")),
        EXIT_USAGE,
        "no *_optim_states.pt shard",
    ),
    # -- export: the tokenizer written next to the weights
    BadInput(
        "export-tokenizer-dir-without-files",
        "repo_train",
        lambda ctx: [
            *_export(lambda c: lightning_like(c.tmp / "run.ckpt"))(ctx),
            "--tokenizer",
            str(file_at("empty/notes.txt", "")(ctx).parent),
        ],
        EXIT_USAGE,
        "has none of tokenizer.json",
    ),
    BadInput(
        "export-run-tokenizer-gone",
        "repo_train",
        _export_to(lambda ctx: ctx.tmp / "hf", _run_tokenizer_checkpoint(lambda ctx: ctx.tmp / "moved_tokenizer")),
        EXIT_USAGE,
        "the tokenizer data.train.tokenizer",
    ),
    BadInput(
        "export-tokenizer-of-another-model",
        "repo_train",
        _export_to(lambda ctx: ctx.tmp / "hf", _run_tokenizer_checkpoint(_big_tokenizer)),
        EXIT_USAGE,
        "is not this model's tokenizer",
    ),
    # -- export: its own options (argparse errors are one line too)
    BadInput(
        "export-without-out",
        "repo_train",
        lambda ctx: ["export", "--checkpoint", str(lightning_like(ctx.tmp / "run.ckpt"))],
        EXIT_USAGE,
        "missing option --out",
    ),
    BadInput(
        "export-unknown-dtype",
        "repo_train",
        lambda ctx: [*_export(lambda c: lightning_like(c.tmp / "run.ckpt"))(ctx), "--dtype", "int8"],
        EXIT_USAGE,
        "option --dtype: expected one of ['float32', 'bfloat16', 'float16'], got 'int8'",
    ),
    # -- garbage files and model directories (issue 24)
    BadInput(  # a misspelt local path looks like org/name, but is no hub id: no download hint
        "fit-init-from-misspelt-local-path",
        "repo_train",
        _fit("--model.init_from", "models/no-such-model"),
        EXIT_USAGE,
        "model.init_from='models/no-such-model' is not an HF model directory: no such directory",
    ),
    BadInput(
        "export-tokenizer-misspelt-names-its-sibling",
        "repo_train",
        lambda ctx: [*_export_tokenizer(lambda path: None)(ctx)[:-1], str(ctx.tmp / "tokeniser")],
        EXIT_USAGE,
        "the tokenizer --tokenizer '{tmp}/tokeniser': no such directory (did you mean '{tmp}/tokenizer'?)",
    ),
    BadInput(
        "fit-init-from-hub-id",
        "repo_train",
        _fit("--model.init_from", HUB_ID),
        EXIT_USAGE,
        "is not a local directory; this project loads local model directories only (offline): download it first",
    ),
    BadInput(
        "export-tokenizer-json-garbage",
        "repo_train",
        _export_tokenizer(garbage("tokenizer.json")),
        EXIT_USAGE,
        "tokenizer.json is not a tokenizer's tokenizer.json (a JSON object): it is binary",
    ),
    BadInput(
        "export-tokenizer-own-code",
        "repo_train",
        _export_tokenizer(tokenizer_with_own_code),
        EXIT_USAGE,
        "never runs a model's code (no trust_remote_code)",
    ),
    BadInput(
        "fit-config-binary",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(file_at("train.yaml", b"\x1f\x8b\x08\x00\xff")(ctx))]),
        EXIT_USAGE,
        "train.yaml is not a YAML config file: it is binary, not UTF-8 text (byte 0x8b at offset 1)",
    ),
    BadInput(
        "demo-config-binary",
        "repo_train",
        lambda ctx: ["demo", "--config", str(file_at("demo.yaml", b"\xff\xd8\xff")(ctx))],
        EXIT_USAGE,
        "demo.yaml is not a YAML config file: it is binary",
    ),
    BadInput(
        "export-out-under-a-file",
        "repo_train",
        _export_to(lambda ctx: file_at("notes.txt", "mine\n")(ctx) / "hf"),
        EXIT_USAGE,
        "notes.txt is a file, not a directory; pass another --out",
    ),
    # -- files that exist but this user may not read: one line naming the file, never "No such file" (issue 24)
    BadInput(
        "fit-ckpt-unreadable",
        "repo_train",
        denying(_ckpt(lambda ctx: lightning_like(ctx.tmp / "run.ckpt")), "run.ckpt"),
        EXIT_USAGE,
        "cannot read {tmp}/run.ckpt: permission denied",
    ),
    BadInput(
        "export-checkpoint-unreadable",
        "repo_train",
        denying(_export_to(lambda ctx: ctx.tmp / "hf"), "run.ckpt"),
        EXIT_USAGE,
        "cannot read {tmp}/run.ckpt: permission denied",
    ),
    BadInput(
        "fit-config-unreadable",
        "repo_train",
        denying(
            _fit_with(lambda ctx: ["--config", str(file_at("train.yaml", "model:\n  lr: 0.01\n")(ctx))]), "train.yaml"
        ),
        EXIT_USAGE,
        "cannot read {tmp}/train.yaml: permission denied",
    ),
    BadInput(
        "demo-config-unreadable",
        "repo_train",
        denying(lambda ctx: ["demo", "--config", str(file_at("demo.yaml", "steps: 1\n")(ctx))], "demo.yaml"),
        EXIT_USAGE,
        "cannot read {tmp}/demo.yaml: permission denied",
    ),
    BadInput(
        "fit-init-from-config-json-unreadable",
        "repo_train",
        denying(_init_from(repo_model), "repo/config.json"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/config.json: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-init-from-weights-unreadable",
        "repo_train",
        denying(_init_from(repo_model), "repo/model.safetensors"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/model.safetensors: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-init-from-folder-not-enterable",
        "repo_train",
        denying(_init_from(repo_model), "repo"),
        EXIT_USAGE,
        "cannot read {tmp}/repo: permission denied",
    ),
    BadInput(
        "export-tokenizer-unreadable",
        "repo_train",
        denying(_export_tokenizer(lambda path: None), "tokenizer/tokenizer_config.json"),
        EXIT_USAGE,
        "cannot read {tmp}/tokenizer/tokenizer_config.json: permission denied",
    ),
    BadInput(
        "fit-text-txt-unreadable",
        "repo_train",
        denying(_fit_with(_data(TextData, file_at("docs.txt", "a b c\n"), seq_len=16)), "docs.txt"),
        EXIT_USAGE,
        "cannot read {tmp}/docs.txt: permission denied",
    ),
    BadInput(
        "fit-text-jsonl-unreadable",
        "repo_train",
        denying(_fit_with(_data(TextData, file_at("docs.jsonl", '{"text": "a"}\n'), seq_len=16)), "docs.jsonl"),
        EXIT_USAGE,
        "cannot read {tmp}/docs.jsonl: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-text-tokenizer-unreadable",
        "repo_train",
        denying(_fit_with(_data(TextData, file_at("docs.txt", "a b c\n"), seq_len=16)), "tokenizer/tokenizer.json"),
        EXIT_USAGE,
        "cannot read {tmp}/tokenizer/tokenizer.json: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-prompt-completion-unreadable",
        "repo_train",
        denying(
            _fit_with(_data(PromptCompletionData, file_at("pc.jsonl", '{"prompt": "a", "completion": "b"}\n'))),
            "pc.jsonl",
        ),
        EXIT_USAGE,
        "cannot read {tmp}/pc.jsonl: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-olmo-numpy-mix-unreadable",
        "repo_train",
        denying(
            _fit_with(_data(OlmoNumpyData, _numpy_mix(np.arange(64, dtype=np.uint16).tobytes()), **NUMPY)), "mix.txt"
        ),
        EXIT_USAGE,
        "cannot read {tmp}/mix.txt: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-olmo-numpy-shard-unreadable",
        "repo_train",
        denying(
            _fit_with(_data(OlmoNumpyData, _numpy_mix(np.arange(64, dtype=np.uint16).tobytes()), **NUMPY)), "shard.npy"
        ),
        EXIT_USAGE,
        "cannot read {tmp}/shard.npy: permission denied",
        slow=True,  # the kind: fit-text-txt-unreadable, fit-ckpt-unreadable
    ),
    BadInput(
        "fit-text-folder-not-enterable",
        "repo_train",
        denying(_fit_with(_data(TextData, file_at("data/docs.txt", "a b c\n"), seq_len=16)), "data"),
        EXIT_USAGE,
        "cannot read {tmp}/data/docs.txt: permission denied (this user may not enter the folder {tmp}/data)",
    ),
    # == rows: insert above this line ==
]


@pytest.mark.parametrize("row", row_params(ROWS))
def test_bad_input(row: BadInput, tmp_path, capsys, monkeypatch, one_thread):
    check_row(row, tmp_path, capsys, monkeypatch)


def test_training_init_from_refuses_weights_of_another_architecture(tmp_path):
    from repo_train.training.module import RePoLightningModule

    module = RePoLightningModule(init_from=str(llama_as_olmo2(tmp_path)), position="repo")
    with pytest.raises(ValueError, match="do not fit RePoOlmo2ForCausalLM as configured: 12 missing"):
        module.configure_model()
    assert module.model is None


def test_export_reads_a_real_lightning_checkpoint_with_weights_only(tmp_path, one_thread):
    """A checkpoint Lightning really wrote (1 step) exports; nothing in it needs an allow-listed global."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from repo_train.export import export_checkpoint
    from repo_train.training.datamodule import RePoDataModule
    from repo_train.training.module import RePoLightningModule

    pl.seed_everything(0, verbose=False)
    data = RePoDataModule(
        train=SyntheticData(seq_len=16, num_samples=32, seed=1),
        global_batch_size=4,
        micro_batch_size=4,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1)],
    )
    trainer.fit(RePoLightningModule(lr=1e-3, attn_implementation="sdpa"), data)
    checkpoint = next((tmp_path / "ckpt").glob("*.ckpt"))
    assert torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint) == []
    model = export_checkpoint(checkpoint, tmp_path / "hf")
    assert model.config.position_method == "repo"


def test_export_refuses_a_crafted_zero_shard(tmp_path):
    """The ZeRO path: DeepSpeed's reader asks for weights_only=False; export forces weights_only anyway."""
    from repo_train.export import export_checkpoint

    path = zero_dir_with(tmp_path, {"optimizer_state_dict": {"zero_stage": 2}, "x": Evil(tmp_path / "pwned")})
    with pytest.raises(ValueError, match="refused to unpickle"):
        export_checkpoint(path, tmp_path / "hf")
    assert not (tmp_path / "pwned").exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_text_file_of_one_huge_line_is_refused_before_datasets_reads_it(tmp_path, monkeypatch):
    """`datasets`' json reader would hold a multi-GB line whole: the line cap (lowered to 1 MiB here, 64 MiB
    really) refuses a 3 MB one-line .jsonl first, in one line naming the file and the line (and `fit` says it
    as its one-line error, like every ValueError of a data source)."""
    import repo_common.json_files
    from repo_train.data.text import TextDataset

    monkeypatch.setattr(repo_common.json_files, "MAX_LINE_BYTES", 2**20)
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "' + "word " * 600_000 + '"}\n')
    phrase = "docs.jsonl:1 is longer than 1,048,576 bytes: a JSON-lines file holds one example a line"
    with pytest.raises(ValueError, match=phrase):
        TextDataset([path], tokenizer=with_tokenizer(tmp_path / "tokenizer"), seq_len=16, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # datasets never started reading


@pytest.mark.parametrize(
    ("sample_by", "phrase"),
    [
        ("line", "docs.txt:1 is longer than 67,108,864 bytes: with txt_sample_by=line a .txt file holds one document"),
        ("paragraph", "docs.txt:1-1 is longer than 67,108,864 bytes: with txt_sample_by=paragraph"),
        ("document", "docs.txt is 3,221,225,472 bytes, more than one document may be (67,108,864 bytes)"),
    ],
)
def test_a_multi_gb_one_line_txt_file_is_refused_before_datasets_reads_it(tmp_path, sample_by, phrase):
    """A 3 GiB .txt of one line (sparse: no disk used) would be a MemoryError in `datasets`' text reader; the
    document cap (the real 64 MiB) refuses it in one line after reading at most that much of it."""
    from repo_train.data.text import TextDataset

    path = tmp_path / "docs.txt"
    path.write_text("the first words ")
    os.truncate(path, 3 * 2**30)
    tokenizer = with_tokenizer(tmp_path / "tokenizer")
    with pytest.raises(ValueError, match=re.escape(phrase)) as info:
        TextDataset([path], tokenizer=tokenizer, seq_len=16, txt_sample_by=sample_by, cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cache").exists()  # datasets never started reading


def test_the_paragraph_cap_counts_up_to_a_blank_line(tmp_path, monkeypatch):
    """Paragraphs of many short lines: refused when one paragraph passes the cap, accepted when blank lines cut
    them shorter (the cap is on a document, not on the file)."""
    from repo_train.data import text

    monkeypatch.setattr(text, "MAX_TXT_DOCUMENT_BYTES", 1000)
    lines = ["twenty bytes a line\n"] * 100  # 2,000 bytes
    one_paragraph, paragraphs = tmp_path / "one.txt", tmp_path / "many.txt"
    one_paragraph.write_text("".join(lines))
    paragraphs.write_text("\n".join("".join(lines[i : i + 10]) for i in range(0, 100, 10)))
    with pytest.raises(ValueError, match=r"one.txt:1-51 is longer than 1,000 bytes"):
        text.check_txt_documents(one_paragraph, "paragraph")
    text.check_txt_documents(paragraphs, "paragraph")
    text.check_txt_documents(one_paragraph, "line")
    with pytest.raises(ValueError, match=r"one.txt is 2,000 bytes"):
        text.check_txt_documents(one_paragraph, "document")


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (lambda tmp: check_init_from(str(edited_model("m", garbage("config.json", b"[]"))(tmp))), "holds a JSON list"),
        (lambda tmp: check_init_from(str(edited_model("m", garbage("config.json"))(tmp))), "it is binary, not UTF-8"),
        (lambda tmp: load_tokenizer(_tokenizer_dir(tokenizer_with_own_code)(Context(tmp))), "no trust_remote_code"),
        (lambda tmp: load_tokenizer(_tokenizer_dir(garbage("tokenizer.json"))(Context(tmp))), "tokenizer.json is not"),
        (lambda tmp: load_tokenizer(str(tmp / "no" / "tokenizer")), "tokenizer': no such directory; pass a local"),
        (lambda tmp: read_mix_file(_shard_as_mix_file(None)(Context(tmp))), "is binary, not a text list of shard paths"),
        (lambda tmp: read_mix_file(_shard_as_mix_file(17 * 2**20)(Context(tmp))), "is 17 MB, not a list of shard paths"),
    ],
    ids=[
        "init-from-config-a-list", "init-from-config-binary", "data-tokenizer-own-code", "data-tokenizer-json-garbage",
        "data-tokenizer-missing-path", "shard-as-mix-file", "big-shard-as-mix-file",
    ],
)  # fmt: skip
def test_training_inputs_are_refused_by_their_checks(tmp_path, make, phrase):
    """What `fit` checks before training (init_from, a data source's tokenizer and mix file), called directly: the
    CLI turns these ValueError/OSError into the one line (rows above); each row through `fit` costs ~1.5 s."""
    before = tree_bytes(tmp_path)
    with pytest.raises((ValueError, OSError)) as info:
        make(tmp_path)
    message = str(info.value)
    assert phrase in message and "\n" not in message, message
    after = tree_bytes(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before
