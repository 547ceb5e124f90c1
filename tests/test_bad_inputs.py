"""Bad inputs are refused with one line, and leave earlier outputs byte-identical.

`BAD_INPUTS` is one table (issue 13): a row builds its input (and any earlier
outputs) under a fresh directory, names the command line and its arguments,
the expected exit code, a phrase the one-line message must contain, and
optionally a path that must not exist afterwards (a crafted file's side
effect). `test_bad_input` runs every row in this process: the command's
`main(argv)`, then checks code, message and files. Add a row per new bad input.

Below the table: the Python-API checks that are not command lines (the
`from_pretrained` refusal under a memory cap, the lock module itself, the
training `init_from` load).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import resource
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

import repo_train  # noqa: F401  (registers repo_olmo2)
from evaluation.models import byte_tokenizer
from repo_common.cli_errors import EXIT_USAGE
from repo_common.run_lock import LOCK_FILE, RunLockedError, run_lock
from repo_train.data import DataSource, OlmoNumpyData, PromptCompletionData, SyntheticData, TextData
from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny

ROOT = Path(__file__).resolve().parents[1]
RUN_LOCK_PY = ROOT / "repo_common" / "run_lock.py"
CLIS = {"evaluation": "evaluation.cli", "search": "search.cli", "repo_train": "repo_train.cli"}
VOCAB = 258  # the byte tokenizer


# ----------------------------------------------------------------------------- inputs


def _fields(**overrides) -> dict:
    """A tiny OLMo-2 shape as plain config fields (no position method)."""
    config = tiny(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, bos_token_id=None, **overrides)
    drop = ("model_type", "architectures", "transformers_version", "position_method", "repo_start_layer")
    return {k: v for k, v in config.to_dict().items() if k not in (*drop, "repo_hidden_size")}


def _write_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        config.pop(key)
    (path / "config.json").write_text(json.dumps(config))


def _with_tokenizer(path: Path) -> Path:
    byte_tokenizer().save_pretrained(path)
    return path


def llama_as_olmo2(tmp: Path) -> Path:
    """Llama weights of the same width under an OLMo-2 config.json (names differ: q/k norms, layer norms)."""
    path = tmp / "llama_as_olmo2"
    LlamaForCausalLM(LlamaConfig(**_fields())).save_pretrained(path)
    _write_config(path, model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    return _with_tokenizer(path)


def llama_as_repo(tmp: Path) -> Path:
    path = tmp / "llama_as_repo"
    LlamaForCausalLM(LlamaConfig(**_fields())).save_pretrained(path)
    _write_config(path, model_type="repo_olmo2", architectures=["RePoOlmo2ForCausalLM"], position_method="rope")
    return _with_tokenizer(path)


def olmo2_other_ffn(tmp: Path) -> Path:
    """OLMo-2 weights with a 128-wide MLP, config.json saying 96: mis-shaped."""
    path = tmp / "olmo2_other_ffn"
    Olmo2ForCausalLM(Olmo2Config(**_fields())).save_pretrained(path)
    _write_config(path, intermediate_size=96)
    return _with_tokenizer(path)


def repo_model(tmp: Path, name: str = "repo") -> Path:
    path = tmp / name
    RePoOlmo2ForCausalLM(
        tiny(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, position_method="repo")
    ).save_pretrained(path)
    return _with_tokenizer(path)


def repo_partial(tmp: Path) -> Path:
    """A REPO checkpoint missing one layer's predictor."""
    path = repo_model(tmp, "repo_partial")
    state = load_file(path / "model.safetensors")
    del state["model.layers.3.self_attn.final_map.weight"]
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    return path


def repo_weights_as_olmo2(tmp: Path) -> Path:
    """REPO weights under a plain OLMo-2 config.json (no pe_config): the predictors would be dropped."""
    path = repo_model(tmp, "repo_as_olmo2")
    _write_config(path, model_type="olmo2", architectures=["Olmo2ForCausalLM"], position_method=None)
    return path


def published_without_repo_weights(tmp: Path) -> Path:
    """The published RePo layout (olmo2 + pe_config) whose REPO predictor weights are absent."""
    path = tmp / "published_no_repo"
    Olmo2ForCausalLM(Olmo2Config(**_fields())).save_pretrained(path)
    _write_config(path, pe_config={"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 1})
    return _with_tokenizer(path)


def config_only(tmp: Path, name: str, **config) -> Path:
    """A directory with only a config.json (and a tiny weights file), e.g. of another architecture."""
    path = tmp / name
    path.mkdir()
    if config:
        (path / "config.json").write_text(json.dumps(config))
    save_file({"x": torch.zeros(2)}, path / "model.safetensors", metadata={"format": "pt"})
    return path


class Evil:
    """Unpickling this creates the file named by `target` (what a crafted checkpoint could do)."""

    def __init__(self, target: Path):
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


def lightning_like(path: Path) -> Path:
    """What export reads from a Lightning .ckpt: model.* weights and the model config."""
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "model_config": model.config.to_dict(), "global_step": 1}, path)
    return path


def zero_dir_with(tmp: Path, payload) -> Path:
    """A DeepSpeed ZeRO checkpoint directory layout whose model and optimizer shards are `payload`."""
    path = tmp / "zero.ckpt"
    (path / "checkpoint").mkdir(parents=True)
    (path / "latest").write_text("checkpoint")
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"):
        torch.save(payload, path / "checkpoint" / name)
    return path


# ----------------------------------------------------------------------------- lock holders


HOLDER = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
    run_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_lock)
    with run_lock.run_lock(sys.argv[2], command="holder"):
        print("held", flush=True)
        sys.stdin.read()
    """
)


class Context:
    """What a row's setup gets: the directory, and `hold(lock_file)` to have another process own a lock."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.holders: list[subprocess.Popen] = []

    def hold(self, lock_file: Path) -> subprocess.Popen:
        """Start a process (stdlib only, about 50 ms) that holds `lock_file` until `release_all`."""
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(RUN_LOCK_PY), str(lock_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "held"
        self.holders.append(proc)
        return proc

    def release_all(self) -> None:
        for proc in self.holders:
            proc.stdin.close()
            proc.wait(timeout=10)


def _earlier_run(out: Path) -> Path:
    """An evaluation run directory with earlier results."""
    out.mkdir(parents=True)
    (out / "records.jsonl").write_text('{"id": "a", "task": "kv", "method": "baseline", "score": 1.0}\n')
    (out / "run.json").write_text('{"format_version": 1}\n')
    return out


def _foreign_lock(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": 4242, "host": "elsewhere.example", "command": "evaluation run"}))


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class BadInput:
    id: str
    cli: str
    """Key of CLIS: whose `main(argv)` runs."""
    setup: Callable[[Context], list[str]]
    """Builds the input (and earlier outputs) under ctx.tmp; returns argv."""
    code: int
    phrase: str
    """Must appear in the one stderr line."""
    absent: str | None = None
    """A path (relative to ctx.tmp) that must not exist afterwards."""


EVAL = ["run", "--tasks", "kv", "--num-examples", "2", "--num-keys", "2", "--max-new-tokens", "2", "--no-progress"]
EVAL += ["--no-report"]


def _eval(model: Callable[[Path], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: [*EVAL, "--model", str(model(ctx.tmp)), "--out", str(_earlier_run(ctx.tmp / "out"))]


def _search(model: Callable[[Path], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: ["run", "--model", str(model(ctx.tmp)), "--out", str(ctx.tmp / "scales" / "s.json")]


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


def _locked_eval(ctx: Context) -> list[str]:
    out = _earlier_run(ctx.tmp / "out")
    ctx.hold(out / LOCK_FILE)
    return [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(out)]


def _foreign_eval(ctx: Context) -> list[str]:
    out = _earlier_run(ctx.tmp / "out")
    _foreign_lock(out / LOCK_FILE)
    return [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(out)]


def _locked_search(ctx: Context) -> list[str]:
    scales = ctx.tmp / "scales"
    scales.mkdir()
    (scales / "s.state.json").write_text('{"earlier": true}\n')
    ctx.hold(scales / "s.lock")
    return ["run", "--model", str(repo_model(ctx.tmp)), "--out", str(scales / "s.json"), "--resume"]


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


TINY_SEARCH = str(ROOT / "configs" / "search" / "tiny.yaml")


def _tmp_args(ctx: Context, args) -> list[str]:
    return [arg.replace("{tmp}", str(ctx.tmp)) for arg in args]


def _ev_fresh(*extra: str, model: Callable[[Path], Path] = repo_model) -> Callable[[Context], list[str]]:
    """EVAL of a tiny model into a new ctx.tmp/out (removed again when refused); `{tmp}` in `extra` is ctx.tmp."""
    return lambda ctx: [*EVAL, *_tmp_args(ctx, extra), "--model", str(model(ctx.tmp)), "--out", str(ctx.tmp / "out")]


def _ev_with(make: Callable[[Context], list[str]]) -> Callable[[Context], list[str]]:
    """EVAL of a tiny model into a new ctx.tmp/out, plus the arguments `make` returns after building its files."""
    return lambda ctx: [*EVAL, *make(ctx), "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]


def _ev_data_dir(files: dict[str, str], *extra: str) -> Callable[[Context], list[str]]:
    """`--data-dir ctx.tmp/data` holding `files` (name -> text), plus `extra` options."""

    def make(ctx: Context) -> list[str]:
        data = ctx.tmp / "data"
        data.mkdir()
        for name, text in files.items():
            (data / name).write_text(text)
        return ["--data-dir", str(data), *extra]

    return _ev_with(make)


def _ev_earlier(edit: Callable[[Path], None]) -> Callable[[Context], list[str]]:
    """An earlier run of the same command stopped after one record (`--max-records 1`), then `edit(out)`."""

    def make(ctx: Context) -> list[str]:
        argv = [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]
        assert run_cli("evaluation", [*argv, "--max-records", "1"]) == 3
        edit(ctx.tmp / "out")
        return argv

    return make


def _duplicate_first_record(out: Path) -> None:
    """records.jsonl gets its first record again, with another prediction and score (two writers?)."""
    record = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    record.update(prediction="another answer", score=1.0 - record["score"])
    with open(out / "records.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


def _manifest_without_metric(out: Path) -> None:
    """run.json as an older version wrote it: no metric in the task entry (kv then scored best_subspan_em)."""
    manifest = json.loads((out / "run.json").read_text())
    del manifest["tasks"]["kv"]["metric"]
    (out / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _damaged_weights(damage: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    """A tiny model whose model.safetensors is `damage`d (truncated, overwritten)."""

    def make(tmp: Path) -> Path:
        path = repo_model(tmp, "damaged")
        weights = path / "model.safetensors"
        weights.write_bytes(damage(weights.read_bytes()))
        return path

    return make


def _other_width(tmp: Path) -> Path:
    """A tiny model (hidden size 64) whose config.json says 128."""
    path = repo_model(tmp, "other_width")
    _write_config(path, hidden_size=128)
    return path


def _gpt2_model(tmp: Path) -> Path:
    """A real tiny GPT-2 (absolute positions, `transformer.h`): no RoPE layers to scale."""
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp / "gpt2_model"
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(path)
    return _with_tokenizer(path)


def _scale_json(num_layers: int = 4, **changes) -> dict:
    """A complete scale file of a 3-point Bézier curve whose scales follow it, then `changes`."""
    from evaluation.methods.lpes.curves import curve_scales

    points = [[0.0, 1.2], [2.0, 1.9], [3.0, 1.4]]
    scales = curve_scales("bezier", [p[0] for p in points], [p[1] for p in points], num_layers).tolist()
    data = {
        "format_version": 1,
        "num_layers": num_layers,
        "curve": {"type": "bezier", "degree": 2},
        "control_points": points,
        "scales": scales,
        "fitness": {"overall": 0.5, "per_subset": {"begin": 0.5, "middle": 0.5, "end": 0.5}},
        "model": {"name": "tiny", "config_sha256": "0" * 64},
        "search": {"ga": {}, "seed": 0, "weights": {}, "data_sha256": "0", "generations": 1, "wall_time_s": 1.0},
    }
    return {**data, **changes}


def _scale_file(data: dict) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        path = ctx.tmp / "scales" / "s.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return path

    return make


def _ev_lpes(data: dict) -> Callable[[Context], list[str]]:
    """baseline and `lpes:scale_file=` a scale file holding `data`."""
    return _ev_with(lambda ctx: ["--method", "baseline", "--method", f"lpes:scale_file={_scale_file(data)(ctx)}"])


def _se_run(*extra: str, make: Callable[[Context], list[str]] | None = None) -> Callable[[Context], list[str]]:
    """`search run` of configs/search/tiny.yaml to ctx.tmp/scales/s.json, plus `extra` and what `make` returns."""
    return lambda ctx: [
        "run", "--config", TINY_SEARCH, "--out", str(ctx.tmp / "scales" / "s.json"), *_tmp_args(ctx, extra),
        *(make(ctx) if make is not None else []),
    ]  # fmt: skip


def _se_config(text: str) -> Callable[[Context], list[str]]:
    def make(ctx: Context) -> list[str]:
        (ctx.tmp / "search.yaml").write_text(text)
        return ["--config", str(ctx.tmp / "search.yaml")]

    return make


def _truncated_state(ctx: Context) -> list[str]:
    """scales/s.state.json cut off mid-way (a disk that filled up, a copy that broke off)."""
    (ctx.tmp / "scales").mkdir()
    state = '{"state_version": 1, "space": {"num_layers": 4, "num_points": 3, "curve": "bezier"}, "config": {"popu'
    (ctx.tmp / "scales" / "s.state.json").write_text(state)
    return ["--resume"]


def _kv_release_file(ctx: Context, examples: int, keys: int = 4) -> Path:
    """A kv-retrieval-<keys>_keys.jsonl in the release's format with `examples` lines, in ctx.tmp/data."""
    data = ctx.tmp / "data"
    data.mkdir(exist_ok=True)
    lines = []
    for index in range(examples):
        pairs = [[f"key-{index}-{k}", f"value-{index}-{k}"] for k in range(keys)]
        lines.append(json.dumps({"ordered_kv_records": pairs, "key": pairs[1][0], "value": pairs[1][1]}))
    path = data / f"kv-retrieval-{keys}_keys.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _search_show(data: dict) -> Callable[[Context], list[str]]:
    return lambda ctx: ["show", str(_scale_file(data)(ctx))]


# == evaluation and search setups: insert above this line ==
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


def _file(name: str, data: str | bytes) -> Callable[[Context], Path]:
    def make(ctx: Context) -> Path:
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        return path

    return make


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
            train["tokenizer"] = str(_with_tokenizer(ctx.tmp / "tokenizer"))
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


#: What a checkpoint of the tiny default saves about its run (Lightning's hyper_parameters of both modules).
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
    (path / "config.json").write_text(json.dumps({"model_type": "olmo2", **_fields()}))
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
    return _with_tokenizer(ctx.tmp / "big_tokenizer")


# == training and export setups: insert above this line ==


BAD_INPUTS = [
    # -- weights that do not fit the model (issue 13, item 2): evaluation and search loading
    BadInput(
        "eval-llama-weights-olmo2-config",
        "evaluation",
        _eval(llama_as_olmo2),
        EXIT_USAGE,
        "do not fit Olmo2ForCausalLM",
    ),
    BadInput("eval-llama-weights-repo-config", "evaluation", _eval(llama_as_repo), EXIT_USAGE, "12 missing"),
    BadInput("eval-mis-shaped-mlp", "evaluation", _eval(olmo2_other_ffn), EXIT_USAGE, "mis-shaped (model.layers.0.mlp"),
    BadInput("eval-partial-repo", "evaluation", _eval(repo_partial), EXIT_USAGE, "its REPO weights are partial"),
    BadInput("eval-repo-weights-dropped", "evaluation", _eval(repo_weights_as_olmo2), EXIT_USAGE, "9 unexpected"),
    BadInput(
        "eval-published-no-repo", "evaluation", _eval(published_without_repo_weights), EXIT_USAGE, "no REPO weights"
    ),
    BadInput("search-llama-weights", "search", _search(llama_as_olmo2), EXIT_USAGE, "do not fit Olmo2ForCausalLM"),
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
    # -- one writer per output (item 3)
    BadInput("eval-out-locked", "evaluation", _locked_eval, EXIT_USAGE, "is in use by pid"),
    BadInput("eval-out-locked-other-host", "evaluation", _foreign_eval, EXIT_USAGE, "on host elsewhere.example"),
    BadInput("search-out-locked", "search", _locked_search, EXIT_USAGE, "is in use by pid"),
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
    # -- evaluation: prompts that cannot fit (issue 13, item 5), refused from lengths alone
    BadInput(
        "eval-kv-75-keys-over-max-length",
        "evaluation",
        _ev_fresh("--num-keys", "75", "--max-length", "2048"),
        EXIT_USAGE,
        "10 of 10 prompts exceed the 2046-token prompt limit (longest 6231 tokens; the limit is --max-length",
    ),
    # -- evaluation: the model directory
    BadInput(
        "eval-truncated-safetensors",
        "evaluation",
        _eval(_damaged_weights(lambda data: data[: len(data) // 2])),
        EXIT_USAGE,
        "damaged/model.safetensors is not a readable safetensors file",
    ),
    BadInput(
        "eval-corrupt-safetensors",
        "evaluation",
        _eval(_damaged_weights(lambda data: random.Random(1).randbytes(len(data)))),
        EXIT_USAGE,
        "is truncated or corrupt; copy it again",
    ),
    BadInput(
        "eval-other-width",
        "evaluation",
        _eval(_other_width),
        EXIT_USAGE,
        "[258, 64] in the checkpoint, [258, 128] here",
    ),
    BadInput(
        "eval-pi-on-gpt2",
        "evaluation",
        _ev_fresh("--method", "pi:scale=2", model=_gpt2_model),
        EXIT_USAGE,
        "GPT2LMHeadModel does not look like a HF decoder",
    ),
    # -- evaluation: data and options
    BadInput(
        "eval-empty-mdqa-file",
        "evaluation",
        _ev_data_dir({"nq-open-oracle.jsonl": ""}, "--tasks", "mdqa", "--num-documents", "3"),
        EXIT_USAGE,
        "nq-open-oracle.jsonl' is empty (no JSON lines)",
    ),
    BadInput(
        "eval-empty-kv-file",
        "evaluation",
        _ev_data_dir({"kv-retrieval-2_keys.jsonl": "\n\n"}),
        EXIT_USAGE,
        "kv-retrieval-2_keys.jsonl' is empty (no JSON lines)",
    ),
    BadInput(
        "eval-data-dir-without-kv-file",
        "evaluation",
        _ev_data_dir({"README": "not the data\n"}),
        EXIT_USAGE,
        "no kv-retrieval-2_keys.jsonl(.gz) in --data-dir",
    ),
    BadInput(
        "eval-data-dir-missing",
        "evaluation",
        _ev_fresh("--data-dir", "{tmp}/no_such_dir"),
        EXIT_USAGE,
        "no_such_dir' is not a directory",
    ),
    BadInput(
        "eval-batch-size-zero",
        "evaluation",
        _ev_fresh("--batch-size", "0"),
        EXIT_USAGE,
        "option --batch_size: expected a positive integer, got 0 (see python -m evaluation run --help)",
    ),
    BadInput(
        "eval-bad-gold-positions",
        "evaluation",
        _ev_fresh("--gold-positions", "first"),
        EXIT_USAGE,
        "argument --gold-positions: expected one of ['caliope', 'lpes', 'all'] or comma-separated",
    ),
    BadInput(
        "eval-gold-position-out-of-range",
        "evaluation",
        _ev_fresh("--gold-positions", "0,5"),
        EXIT_USAGE,
        "gold position(s) [5] outside [0, 1] for 2 items",
    ),
    BadInput(
        "eval-unknown-method", "evaluation", _ev_fresh("--method", "nosuch"), EXIT_USAGE, "unknown method 'nosuch'"
    ),
    BadInput(
        "eval-unknown-method-parameter",
        "evaluation",
        _ev_fresh("--method", "pi:factor=2"),
        EXIT_USAGE,
        "unknown parameter(s) ['factor'] for method 'pi'; valid parameters are ['scale']",
    ),
    BadInput(
        "eval-lpes-curve-mismatch",
        "evaluation",
        _ev_lpes(_scale_json(scales=[1.0, 1.0, 1.0, 1.0])),
        EXIT_USAGE,
        "scales differ from the bezier curve through control_points",
    ),
    BadInput(
        "eval-lpes-format-version",
        "evaluation",
        _ev_lpes(_scale_json(format_version=2)),
        EXIT_USAGE,
        "format_version 2 is not supported",
    ),
    BadInput(
        "eval-lpes-other-layer-count",
        "evaluation",
        _ev_lpes({"format_version": 1, "num_layers": 8, "scales": [1.0] * 8}),
        EXIT_USAGE,
        "has scales for 8 layers, the model has 4",
    ),
    # -- evaluation: the output directory and earlier results
    BadInput(
        "eval-out-is-a-file",
        "evaluation",
        lambda ctx: [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(_file("out.txt", "notes\n")(ctx))],
        EXIT_USAGE,
        "out.txt is a file; pass --out a directory",
    ),
    BadInput(
        "eval-records-duplicate-id-other-result",
        "evaluation",
        _ev_earlier(_duplicate_first_record),
        EXIT_USAGE,
        "records.jsonl:2 repeats prompt",
    ),
    BadInput(
        "eval-resume-run-without-metric",
        "evaluation",
        _ev_earlier(_manifest_without_metric),
        EXIT_USAGE,
        "other settings (differs in tasks.kv.metric)",
    ),
    BadInput(
        "eval-truncated-run-json",
        "evaluation",
        _ev_earlier(lambda out: (out / "run.json").write_text((out / "run.json").read_text()[:60])),
        EXIT_USAGE,
        "is not a JSON object, truncated or corrupt",
    ),
    BadInput(
        "report-truncated-summary",
        "evaluation",
        lambda ctx: ["report", "--out", str(_file("out/summary.json", '{"format_version": 2, "results"')(ctx).parent)],
        EXIT_USAGE,
        "is truncated or corrupt; rerun the `python -m evaluation run` command",
    ),
    # -- search
    BadInput(
        "search-truncated-state",
        "search",
        _se_run(make=_truncated_state),
        EXIT_USAGE,
        "s.state.json is not valid JSON (Unterminated string starting at: line 1, column 97): it is truncated or "
        "corrupt; delete it to start the search over",
    ),
    BadInput(
        "search-unsupported-architecture",
        "search",
        lambda ctx: _se_run("--model", str(_gpt2_model(ctx.tmp)))(ctx),
        EXIT_USAGE,
        "GPT2LMHeadModel does not look like a HF decoder",
    ),
    BadInput(
        "search-truncated-safetensors",
        "search",
        _search(_damaged_weights(lambda data: data[:4096])),
        EXIT_USAGE,
        "model.safetensors is not a readable safetensors file",
    ),
    BadInput(
        "search-config-unknown-key",
        "search",
        _se_run(make=_se_config("task:\n  name: kv\n  num_itemz: 4\n")),
        EXIT_USAGE,
        "unknown key 'task.num_itemz' in task",
    ),
    BadInput(
        "search-population-below-parents",
        "search",
        _se_run(make=_se_config("ga: {population: 2, parents: 3, mutation_offspring: 0, crossover_offspring: 0}\n")),
        EXIT_USAGE,
        "population 2 is smaller than parents 3",
    ),
    BadInput(
        "search-held-out-beyond-the-data",
        "search",
        _se_run(make=lambda ctx: ["--data-dir", str(_kv_release_file(ctx, examples=6).parent)]),
        EXIT_USAGE,
        "the held-out check after the search needs 8 source examples",
    ),
    BadInput(
        "search-unknown-task",
        "search",
        _se_run("--task", "ruler"),
        EXIT_USAGE,
        "option --task.name: expected one of ['mdqa', 'kv'], got 'ruler'",
    ),
    BadInput(
        "search-show-format-version",
        "search",
        _search_show(_scale_json(format_version=2)),
        EXIT_USAGE,
        "format_version 2 is not supported",
    ),
    BadInput(
        "search-show-curve-mismatch",
        "search",
        _search_show(_scale_json(scales=[1.0, 1.5, 1.5, 1.0])),
        EXIT_USAGE,
        "scales differ from the bezier curve",
    ),
    # == evaluation and search rows: insert above this line ==
    # -- training: parser errors are one line (not LightningCLI's ~90-line usage)
    BadInput("fit-unknown-option", "repo_train", _fit("--model.no_such_key", "1"), EXIT_USAGE, "--model.no_such_key"),
    BadInput(
        "fit-max-steps-not-int", "repo_train", _fit("--trainer.max_steps", "abc"), EXIT_USAGE, "'abc' is not valid"
    ),
    BadInput(
        "fit-config-not-a-mapping",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(_file("list.yaml", "- model\n- data\n")(ctx))]),
        EXIT_USAGE,
        "the config is not a YAML mapping",
    ),
    BadInput(
        "fit-config-missing", "repo_train", _fit("--config", "{tmp}/nowhere.yaml"), EXIT_USAGE, "File does not exist"
    ),
    BadInput(
        "fit-config-broken-yaml",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(_file("broken.yaml", "model: {lr: [\n")(ctx))]),
        EXIT_USAGE,
        "the config is not valid YAML",
    ),
    BadInput(
        "fit-config-unknown-key",
        "repo_train",
        _fit_with(lambda ctx: ["--config", str(_file("typo.yaml", "model:\n  learning_rate: 0.1\n")(ctx))]),
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
        _fit_with(lambda ctx: ["--config", str(_file("old.yaml", "data:\n  val: {source: text, seq_len: 8}\n")(ctx))]),
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
        _fit("--model.position_method", "alibi"),
        EXIT_USAGE,
        "unknown position_method 'alibi'",
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
        lambda ctx: [*FIT, "--trainer.default_root_dir", str(_file("root", "a file\n")(ctx))],
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
        _resume("--model.position_method", "rope", "--allow_hparam_changes", "true"),
        EXIT_USAGE,
        "model.position_method = 'repo' in the checkpoint, 'rope' given",
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
        "does not exist",
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
        _fit_with(_data(TextData, _file("docs.jsonl", ""), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl' is empty",
    ),
    BadInput(
        "fit-text-jsonl-broken-line",
        "repo_train",
        _fit_with(_data(TextData, _file("docs.jsonl", '{"text": "a b"}\n{"text": "c\n'), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl:2 is not valid JSON",
    ),
    BadInput(
        "fit-text-jsonl-not-an-object",
        "repo_train",
        _fit_with(_data(TextData, _file("docs.jsonl", '{"text": "a b"}\n["a", "b"]\n'), seq_len=16)),
        EXIT_USAGE,
        "docs.jsonl:2 holds a JSON list, not an object",
    ),
    BadInput(
        "fit-text-txt-empty",
        "repo_train",
        _fit_with(_data(TextData, _file("docs.txt", ""), seq_len=16)),
        EXIT_USAGE,
        "docs.txt' is empty",
    ),
    BadInput(
        "fit-text-txt-not-utf8",
        "repo_train",
        _fit_with(_data(TextData, _file("docs.txt", b"one line\n\xff\xfe binary\n"), seq_len=16)),
        EXIT_USAGE,
        "docs.txt:2 is not UTF-8 text",
    ),
    BadInput(
        "fit-prompt-completion-broken-line",
        "repo_train",
        _fit_with(
            _data(PromptCompletionData, _file("pc.jsonl", '{"prompt": "a", "completion": "b"}\n{"prompt": "a"\n'))
        ),
        EXIT_USAGE,
        "pc.jsonl:2 is not valid JSON",
    ),
    BadInput(
        "fit-prompt-completion-empty",
        "repo_train",
        _fit_with(_data(PromptCompletionData, _file("pc.jsonl", "\n"))),
        EXIT_USAGE,
        "no prompt/completion examples",
    ),
    BadInput(
        "fit-prompt-completion-not-utf8",
        "repo_train",
        _fit_with(_data(PromptCompletionData, _file("pc.jsonl", b'{"prompt": "a", "completion": "\xff"}\n'))),
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
        _export_to(_file("hf", "a file\n")),
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
            str(_file("empty/notes.txt", "")(ctx).parent),
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
    # == training and export rows: insert above this line ==
]


@pytest.fixture
def ctx(tmp_path):
    context = Context(tmp_path)
    yield context
    context.release_all()


def tree_bytes(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (relative) -> its bytes (None for a directory): a tree to compare before/after."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@contextmanager
def address_space_cap(extra: int = 2 * 2**30):
    """Limit this process to its current address space + `extra` bytes for the block (soft RLIMIT_AS).

    A regression that builds a full-size model from a bad input then fails
    with an allocation error within a second instead of eating the machine.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    current = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    cap = current + extra if hard == resource.RLIM_INFINITY else min(current + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_cli(cli: str, argv: list[str]) -> int:
    try:
        return importlib.import_module(CLIS[cli]).main(argv)
    except SystemExit as stop:  # argparse
        return int(stop.code or 0)


def refused_in_one_line(cli: str, argv: list[str], root: Path, code: int, phrase: str, capsys, monkeypatch) -> None:
    """`python -m CLI ARGV` (in-process, under `address_space_cap`) exits with `code` and one stderr line
    `...error: ...` holding `phrase`, and leaves every file under `root` as it was, none added or removed."""
    before = tree_bytes(root)
    monkeypatch.setattr(sys, "argv", [f"python -m {cli}"])
    capsys.readouterr()
    with address_space_cap():
        got = run_cli(cli, argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, err
    assert len(lines) == 1 and "error:" in lines[0], err
    assert phrase in lines[0], lines[0]
    after = tree_bytes(root)
    assert {k: v for k, v in after.items() if k in before} == before, "a file that was there changed"
    assert set(after) == set(before), f"files were added or removed: {set(after) ^ set(before)}"


@pytest.mark.parametrize("row", BAD_INPUTS, ids=lambda row: row.id)
def test_bad_input(row: BadInput, ctx, capsys, monkeypatch, one_thread):
    refused_in_one_line(row.cli, row.setup(ctx), ctx.tmp, row.code, row.phrase, capsys, monkeypatch)
    if row.absent is not None:
        assert not (ctx.tmp / row.absent).exists()


# ----------------------------------------------------------------------------- item 1: from_pretrained


WRONG_DIRECTORIES = {
    "no-config": ({}, "has no config.json"),
    "gpt2": ({"model_type": "gpt2", "n_embd": 64}, "model_type 'gpt2'"),
    "llama": ({"model_type": "llama", "hidden_size": 64}, "model_type 'llama'"),
    "no-model-type": ({"hidden_size": 64}, "no model_type"),
}


@pytest.mark.parametrize("loader", ["config", "model"])
@pytest.mark.parametrize("name", WRONG_DIRECTORIES)
def test_from_pretrained_refuses_other_directories_before_building(tmp_path, name, loader, monkeypatch):
    """Refused from config.json alone: building any model (the 7B default shape) fails this test."""
    config, phrase = WRONG_DIRECTORIES[name]
    path = config_only(tmp_path, name, **config)

    def tripwire(self, *args, **kwargs):
        raise AssertionError("a model was built from a directory that should have been refused")

    monkeypatch.setattr(RePoOlmo2ForCausalLM, "__init__", tripwire)
    load = RePoOlmo2Config.from_pretrained if loader == "config" else RePoOlmo2ForCausalLM.from_pretrained
    start = time.perf_counter()
    with pytest.raises((ValueError, FileNotFoundError), match=phrase) as info:
        load(path)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert "\n" not in message and "'olmo2'" in message and "'repo_olmo2'" in message and "pe_config" in message


MEMORY_CAPPED = """
import json, resource, sys, time
cap = 3 * 2**30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM
results = {}
for path in sys.argv[1:]:
    for load in (RePoOlmo2Config.from_pretrained, RePoOlmo2ForCausalLM.from_pretrained):
        start = time.perf_counter()
        try:
            load(path)
            outcome = "loaded"
        except (ValueError, OSError) as err:
            outcome = f"{type(err).__name__}: {err}"
        except BaseException as err:  # MemoryError, RuntimeError from the allocator: the regression
            outcome = f"CRASH {type(err).__name__}: {str(err)[:200]}"
        results[f"{path}|{load.__qualname__}"] = [outcome, time.perf_counter() - start]
print(json.dumps(results))
"""


@pytest.mark.slow
def test_from_pretrained_refuses_under_a_memory_cap(tmp_path):
    """The same refusals in a process limited to 3 GB of address space (a regression fails, not the machine)."""
    paths = [str(config_only(tmp_path, name, **WRONG_DIRECTORIES[name][0])) for name in WRONG_DIRECTORIES]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_CAPPED, *paths], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(results) == 2 * len(WRONG_DIRECTORIES)
    for key, (outcome, seconds) in results.items():
        name = Path(key.split("|")[0]).name
        assert WRONG_DIRECTORIES[name][1] in outcome, (key, outcome)
        assert seconds < 1.0, (key, seconds)


# ----------------------------------------------------------------------------- item 2: allowed and refused loads


def test_fresh_repo_weights_only_when_asked_for(tmp_path):
    """A vanilla OLMo-2 with position_method='repo' starts REPO fresh; the same directory claiming REPO does not."""
    path = tmp_path / "vanilla"
    Olmo2ForCausalLM(Olmo2Config(**_fields())).save_pretrained(path)
    model = RePoOlmo2ForCausalLM.from_pretrained(path, position_method="repo", repo_start_layer=2)
    assert model.config.position_method == "repo"
    _write_config(path, pe_config={"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 2})
    with pytest.raises(ValueError, match="holds no REPO weights .* pass position_method='repo'"):
        RePoOlmo2ForCausalLM.from_pretrained(path)
    # transformers' own opt-in for mis-shaped weights stays available
    wide = olmo2_other_ffn(tmp_path)
    with pytest.raises(ValueError, match="mis-shaped"):
        RePoOlmo2ForCausalLM.from_pretrained(wide, position_method="rope")
    model = RePoOlmo2ForCausalLM.from_pretrained(wide, position_method="rope", ignore_mismatched_sizes=True)
    assert model.config.intermediate_size == 96


def test_training_init_from_refuses_weights_of_another_architecture(tmp_path):
    from repo_train.training.module import RePoLightningModule

    module = RePoLightningModule(init_from=str(llama_as_olmo2(tmp_path)), position_method="repo")
    with pytest.raises(ValueError, match="do not fit RePoOlmo2ForCausalLM as configured: 12 missing"):
        module.configure_model()
    assert module.model is None


# ----------------------------------------------------------------------------- item 3: the lock itself


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(ctx):
    lock = ctx.tmp / "out" / LOCK_FILE
    holder = ctx.hold(lock)
    owner = json.loads(lock.read_text())
    assert owner["pid"] == holder.pid and owner["host"] == socket.gethostname()
    with pytest.raises(RunLockedError) as info, run_lock(lock, "OUT"):
        pass
    message = str(info.value)
    assert f"pid {holder.pid} on host {socket.gethostname()}" in message and str(lock) in message
    assert "\n" not in message
    ctx.release_all()
    assert not lock.exists()  # released on exit
    with run_lock(lock):
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / LOCK_FILE
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "crashed run"}))
    with run_lock(lock):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"taking over the stale lock {lock} of pid {dead.pid}" in err
    assert not lock.exists()


def test_a_lock_from_another_host_is_refused_not_taken_over(tmp_path):
    lock = tmp_path / LOCK_FILE
    _foreign_lock(lock)
    with (
        pytest.raises(RunLockedError, match="pid 4242 on host elsewhere.example .* delete the lock file"),
        run_lock(lock),
    ):
        pass
    assert json.loads(lock.read_text())["host"] == "elsewhere.example"  # left alone


def test_the_lock_is_released_on_an_exception(tmp_path):
    lock = tmp_path / "d" / LOCK_FILE
    with pytest.raises(KeyError), run_lock(lock):
        raise KeyError("boom")
    assert not lock.exists()
    with run_lock(lock):  # free again
        pass


STARTER = textwrap.dedent(
    """
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("run_lock", sys.argv[1])
    run_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_lock)
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # all start at once
    try:
        with run_lock.run_lock(sys.argv[2]):
            print("won", flush=True)
            time.sleep(1.0)
    except run_lock.RunLockedError as err:
        print("refused", flush=True)
    """
)


def test_of_simultaneous_starters_exactly_one_wins(tmp_path):
    lock = tmp_path / "out" / LOCK_FILE
    start = time.time() + 0.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(RUN_LOCK_PY), str(lock), str(start)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outcomes = sorted(proc.communicate(timeout=30)[0].strip() for proc in procs)
    assert outcomes == ["refused", "refused", "refused", "won"]
    assert not lock.exists()


def test_an_evaluation_run_leaves_no_lock_and_no_directory_when_refused_early(tmp_path):
    from evaluation.runner import RunConfig, run

    out = tmp_path / "new"
    with pytest.raises(ValueError, match="unknown method"):
        run(RunConfig(out=str(out), tasks={"kv": {"num_examples": 1}}, methods=["no-such-method"]))
    assert not out.exists()


# ----------------------------------------------------------------------------- item 6: safe export


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
