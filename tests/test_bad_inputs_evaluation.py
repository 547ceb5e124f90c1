"""Bad inputs to `python -m evaluation` are refused in one line and leave earlier outputs byte-identical.

`ROWS` is the evaluation part of the bad-input table (issue 13; the row and the
check are in tests/bad_input_helpers.py): weights that do not fit the model,
the model directory, data and options, the output directory and earlier
results. Add a row per new bad input.

Below the table, the checks that are not one command line: the too-long refusal
of a large KV task in bounded memory (a subprocess under an address-space cap),
bounded tokenising and the chunked task build giving the same prompts, a full
disk naming the file being written, lpes scale files with and without a curve.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest
from bad_input_helpers import (
    ALIAS_BOMB,
    EVAL,
    HUB_ID,
    ROOT,
    BadInput,
    Context,
    check_row,
    damaged_weights,
    denying,
    edited_model,
    file_at,
    foreign_lock,
    full_disk_on,
    garbage,
    gpt2_model,
    llama_as_olmo2,
    olmo2_other_ffn,
    repo_model,
    run_cli,
    scale_file_at,
    scale_json,
    tiny_fields,
    tmp_args,
    tokenizer_with_own_code,
    with_tokenizer,
    write_config,
)
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

from evaluation.generation import PromptsTooLongError, fit_to_length, tokenize_and_fit, tokenize_prompts
from evaluation.model_loading import byte_tokenizer
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import build_task
from repo_common.cli_errors import EXIT_USAGE
from repo_common.run_lock import LOCK_FILE


def llama_as_repo(tmp: Path) -> Path:
    path = tmp / "llama_as_repo"
    LlamaForCausalLM(LlamaConfig(**tiny_fields())).save_pretrained(path)
    write_config(path, model_type="repo_olmo2", architectures=["RePoOlmo2ForCausalLM"], position_method="rope")
    return with_tokenizer(path)


def _misspelt_model(ctx: Context) -> str:
    """ctx.tmp/models/smollm2-135m: a misspelling of the folder ctx.tmp/models/smollm2-135m-instruct beside it."""
    (ctx.tmp / "models" / "smollm2-135m-instruct").mkdir(parents=True)
    return str(ctx.tmp / "models" / "smollm2-135m")


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
    write_config(path, model_type="olmo2", architectures=["Olmo2ForCausalLM"], position_method=None)
    return path


def published_without_repo_weights(tmp: Path) -> Path:
    """The published RePo layout (olmo2 + pe_config) whose REPO predictor weights are absent."""
    path = tmp / "published_no_repo"
    Olmo2ForCausalLM(Olmo2Config(**tiny_fields())).save_pretrained(path)
    write_config(path, pe_config={"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 1})
    return with_tokenizer(path)


def _earlier_run(out: Path) -> Path:
    """An evaluation run directory with earlier results."""
    out.mkdir(parents=True)
    (out / "records.jsonl").write_text('{"id": "a", "task": "kv", "method": "baseline", "score": 1.0}\n')
    (out / "run.json").write_text('{"format_version": 1}\n')
    return out


def _eval(model: Callable[[Path], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: [*EVAL, "--model", str(model(ctx.tmp)), "--out", str(_earlier_run(ctx.tmp / "out"))]


def _locked_eval(ctx: Context) -> list[str]:
    out = _earlier_run(ctx.tmp / "out")
    ctx.hold(out / LOCK_FILE)
    return [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(out)]


def _foreign_eval(ctx: Context) -> list[str]:
    out = _earlier_run(ctx.tmp / "out")
    foreign_lock(out / LOCK_FILE)
    return [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(out)]


def _ev_fresh(*extra: str, model: Callable[[Path], Path] = repo_model) -> Callable[[Context], list[str]]:
    """EVAL of a tiny model into a new ctx.tmp/out (removed again when refused); `{tmp}` in `extra` is ctx.tmp."""
    return lambda ctx: [*EVAL, *tmp_args(ctx, extra), "--model", str(model(ctx.tmp)), "--out", str(ctx.tmp / "out")]


def _ev_with(make: Callable[[Context], list[str]]) -> Callable[[Context], list[str]]:
    """EVAL of a tiny model into a new ctx.tmp/out, plus the arguments `make` returns after building its files."""
    return lambda ctx: [*EVAL, *make(ctx), "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]


def _ev_data_dir(files: dict[str, str], *extra: str) -> Callable[[Context], list[str]]:
    """`--data_dir ctx.tmp/data` holding `files` (name -> text), plus `extra` options."""

    def make(ctx: Context) -> list[str]:
        data = ctx.tmp / "data"
        data.mkdir()
        for name, text in files.items():
            (data / name).write_text(text)
        return ["--data_dir", str(data), *extra]

    return _ev_with(make)


def _ev_earlier(edit: Callable[[Path], None]) -> Callable[[Context], list[str]]:
    """An earlier run of the same command stopped after one record (`--max_records 1`), then `edit(out)`."""

    def make(ctx: Context) -> list[str]:
        argv = [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(ctx.tmp / "out")]
        assert run_cli("evaluation", [*argv, "--max_records", "1"]) == 3
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


def _other_width(tmp: Path) -> Path:
    """A tiny model (hidden size 64) whose config.json says 128."""
    path = repo_model(tmp, "other_width")
    write_config(path, hidden_size=128)
    return path


def _huge_shape(tmp: Path) -> Path:
    """A tiny model whose config.json claims a million-wide, thousand-layer decoder (petabytes of weights)."""
    path = repo_model(tmp, "huge_shape")
    write_config(path, hidden_size=1_000_000, intermediate_size=4_000_000, num_hidden_layers=1000)
    return path


def _smaller_vocab(tmp: Path) -> Path:
    """A tiny model whose config.json says 200 tokens while its (byte) tokenizer has 258: another model's."""
    path = repo_model(tmp, "smaller_vocab")
    write_config(path, vocab_size=200)
    return path


def _added_tokens_in_prompt(ctx: Context) -> list[str]:
    """A tokenizer with an added token the model has no embedding for, and a task whose prompts contain it."""
    from transformers import AutoTokenizer

    path = repo_model(ctx.tmp, "added_tokens")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_tokens(["<new>"])
    tokenizer.save_pretrained(path)
    data = ctx.tmp / "data"
    data.mkdir()
    rows = [{"question": "q <new>", "answers": ["b"], "ctxs": [{"title": "t", "text": "x", "hasanswer": True}]}]
    (data / "nq-open-oracle.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [*EVAL, "--model", str(path), "--tasks", "mdqa", "--data_dir", str(data), "--num_documents", "1",
            "--num_examples", "1", "--out", str(ctx.tmp / "out")]  # fmt: skip


def _ev_lpes(data: dict) -> Callable[[Context], list[str]]:
    """baseline and `lpes:scale_file=` a scale file holding `data`."""
    return _ev_with(lambda ctx: ["--methods", "baseline", "--methods", f"lpes:scale_file={scale_file_at(data)(ctx)}"])


def _ev_config(text: str) -> Callable[[Context], list[str]]:
    """`run --config ctx.tmp/eval.yaml` (holding `text`) of a tiny model into a new ctx.tmp/out."""

    def make(ctx: Context) -> list[str]:
        config = file_at("eval.yaml", text)(ctx)
        model = repo_model(ctx.tmp)
        return ["run", "--config", str(config), "--model", str(model), "--out", str(ctx.tmp / "out"), "--no_progress"]

    return make


def _kv_file(data: bytes, name: str = "kv-retrieval-2_keys.jsonl") -> Callable[[Context], list[str]]:
    """`--data_dir ctx.tmp/data` whose KV file (`name`) holds the bytes `data`."""

    def make(ctx: Context) -> list[str]:
        file_at(f"data/{name}", data)(ctx)
        return ["--data_dir", str(ctx.tmp / "data")]

    return _ev_with(make)


#: Two release-like KV lines (a real example's fields).
KV_LINES = b"".join(
    json.dumps({"ordered_kv_records": [["k1", "v1"], ["k2", "v2"]], "key": "k1", "value": "v1"}).encode() + b"\n"
    for _ in range(400)
)


#: A minimal summary.json `summarize` accepts.
SUMMARY = json.dumps({"model": {"name": "m"}, "methods": ["baseline"], "tasks": {"kv": {}}, "results": {}})


def _summarize_records(data: bytes, summary: str | bytes = SUMMARY) -> Callable[[Context], list[str]]:
    """`summarize --out` of a run directory whose summary.json holds `summary` and records.jsonl `data`."""

    def make(ctx: Context) -> list[str]:
        file_at("out/summary.json", summary)(ctx)
        file_at("out/records.jsonl", data)(ctx)
        return ["summarize", "--out", str(ctx.tmp / "out")]

    return make


# == setups: insert above this line ==


ROWS = [
    BadInput(
        "eval-config-alias-bomb", "evaluation", _ev_config(ALIAS_BOMB), EXIT_USAGE, "expands to more than 100,000"
    ),
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
    # -- one writer per output (item 3)
    BadInput("eval-out-locked", "evaluation", _locked_eval, EXIT_USAGE, "is in use by pid"),
    BadInput("eval-out-locked-other-host", "evaluation", _foreign_eval, EXIT_USAGE, "on host elsewhere.example"),
    # -- evaluation: prompts that cannot fit (issue 13, item 5), refused from lengths alone
    BadInput(
        "eval-kv-75-keys-over-max-length",
        "evaluation",
        _ev_fresh("--num_keys", "75", "--max_length", "2048"),
        EXIT_USAGE,
        "its first prompt has 6231 tokens, so its prompts exceed the 2046-token prompt limit (--max_length",
    ),
    # -- evaluation: the model directory
    BadInput(
        "eval-truncated-safetensors",
        "evaluation",
        _eval(damaged_weights(lambda data: data[: len(data) // 2])),
        EXIT_USAGE,
        "damaged/model.safetensors is not a readable safetensors file",
    ),
    BadInput(
        "eval-corrupt-safetensors",
        "evaluation",
        _eval(damaged_weights(lambda data: random.Random(1).randbytes(len(data)))),
        EXIT_USAGE,
        "is truncated or corrupt; copy it again",
    ),
    BadInput(
        "eval-huge-seed",
        "evaluation",
        _ev_with(lambda ctx: ["--seed", "100000000000000000000000"]),
        EXIT_USAGE,
        "seed in [0, 2**32)",
    ),
    BadInput("eval-tokenizer-past-vocab", "evaluation", _eval(_smaller_vocab), EXIT_USAGE, "vocabulary only 200"),
    BadInput(
        "eval-added-token-past-vocab", "evaluation", _added_tokens_in_prompt, EXIT_USAGE, "past the model's vocab"
    ),
    BadInput(
        "eval-flash-attention-on-cpu",
        "evaluation",
        _ev_with(lambda ctx: ["--attn_implementation", "flash_attention_2"]),
        EXIT_USAGE,
        "flash_attention_2 needs",
    ),
    BadInput(
        "eval-huge-shape", "evaluation", _eval(_huge_shape), EXIT_USAGE, "of memory available (hidden_size=1000000"
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
        _ev_fresh("--methods", "pi:scale=2", model=gpt2_model),
        EXIT_USAGE,
        "GPT2LMHeadModel does not look like a HF decoder",
    ),
    # -- evaluation: data and options
    BadInput(
        "eval-empty-mdqa-file",
        "evaluation",
        _ev_data_dir({"nq-open-oracle.jsonl": ""}, "--tasks", "mdqa", "--num_documents", "3"),
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
        "no kv-retrieval-2_keys.jsonl(.gz) in --data_dir",
    ),
    BadInput(
        "eval-data-dir-without-mdqa-file",
        "evaluation",
        _ev_data_dir({"README": "not the data\n"}, "--tasks", "mdqa", "--num_documents", "3"),
        EXIT_USAGE,
        "no nq-open-oracle*.jsonl(.gz) in --data_dir '{tmp}/data'; download qa_data/nq-open-oracle.jsonl.gz of the "
        "Lost in the Middle release (Liu et al., TACL 2024) from github.com/nelson-liu/lost-in-the-middle into it",
    ),
    BadInput(
        "eval-data-dir-missing",
        "evaluation",
        _ev_fresh("--data_dir", "{tmp}/no_such_dir"),
        EXIT_USAGE,
        "no_such_dir' is not a directory; download qa_data/nq-open-oracle.jsonl.gz (mdqa) and "
        "kv_retrieval_data/kv-retrieval-75_keys.jsonl.gz (kv) of the Lost in the Middle release (Liu et al., TACL "
        "2024) from github.com/nelson-liu/lost-in-the-middle into one folder, and pass it as --data_dir",
    ),
    BadInput(
        "eval-batch-size-zero",
        "evaluation",
        _ev_fresh("--batch_size", "0"),
        EXIT_USAGE,
        "option --batch_size: expected a positive integer, got 0 (see python -m evaluation run --help)",
    ),
    BadInput(
        "eval-bad-gold-positions",
        "evaluation",
        _ev_fresh("--gold_positions", "first"),
        EXIT_USAGE,
        "argument --gold_positions: expected one of ['ends-20-50-80', 'quartiles', 'all'] or comma-separated",
    ),
    BadInput(
        "eval-gold-positions-old-grid-name",
        "evaluation",
        _ev_fresh("--gold_positions", "caliope"),
        EXIT_USAGE,
        "the gold-position grid 'caliope' is now called 'ends-20-50-80' (ends-20-50-80 = first, 20%, 50%, 80%, last;",
    ),
    BadInput(
        "eval-config-gold-positions-old-grid-name",
        "evaluation",
        _ev_config(
            "tasks:\n  - class_path: evaluation.tasks.KVRetrievalTask\n"
            "    init_args: {num_keys: 2, num_examples: 2, gold_positions: lpes}\n"
        ),
        EXIT_USAGE,
        "the gold-position grid 'lpes' is now called 'quartiles'",
    ),
    BadInput(
        "eval-gold-position-out-of-range",
        "evaluation",
        _ev_fresh("--gold_positions", "0,5"),
        EXIT_USAGE,
        "gold position(s) [5] outside [0, 1] for 2 items",
    ),
    BadInput(
        "eval-dashed-option",
        "evaluation",
        _ev_fresh("--batch-size", "4"),
        EXIT_USAGE,
        "--batch-size is spelt --batch_size (an option is spelt as its config key)",
    ),
    BadInput(
        "eval-method-flag-of-old-versions",
        "evaluation",
        _ev_fresh("--method", "baseline"),
        EXIT_USAGE,
        "--method is spelt --methods (an option is spelt as its config key)",
    ),
    BadInput(
        "eval-unknown-method", "evaluation", _ev_fresh("--methods", "nosuch"), EXIT_USAGE, "unknown method 'nosuch'"
    ),
    BadInput(
        "eval-unknown-method-parameter",
        "evaluation",
        _ev_fresh("--methods", "pi:factor=2"),
        EXIT_USAGE,
        "unknown parameter(s) ['factor'] for method 'pi'; valid parameters are ['scale']",
    ),
    BadInput(
        "eval-lpes-curve-mismatch",
        "evaluation",
        _ev_lpes(scale_json(scales=[1.0, 1.0, 1.0, 1.0])),
        EXIT_USAGE,
        "scales differ from the bezier curve through control_points",
    ),
    BadInput(
        "eval-lpes-format-version",
        "evaluation",
        _ev_lpes(scale_json(format_version=2)),
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
        lambda ctx: [*EVAL, "--model", str(repo_model(ctx.tmp)), "--out", str(file_at("out.txt", "notes\n")(ctx))],
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
        lambda ctx: [
            "report",
            "--out",
            str(file_at("out/summary.json", '{"format_version": 2, "results"')(ctx).parent),
        ],
        EXIT_USAGE,
        "is truncated or corrupt; rerun the `python -m evaluation run` command",
    ),
    # -- garbage files (issue 24): one line naming the file and what it should be
    BadInput(
        "eval-config-json-binary",
        "evaluation",
        _eval(edited_model("config_binary", garbage("config.json"))),
        EXIT_USAGE,
        "config.json is not a model's config.json (a JSON object of the model's settings): it is binary",
    ),
    BadInput(
        "eval-config-json-a-list",
        "evaluation",
        _eval(edited_model("config_list", garbage("config.json", b"[1, 2]"))),
        EXIT_USAGE,
        "config.json is not a model's config.json (a JSON object of the model's settings): it holds a JSON list",
    ),
    BadInput(
        "eval-tokenizer-json-garbage",
        "evaluation",
        _eval(edited_model("tokenizer_garbage", garbage("tokenizer.json"))),
        EXIT_USAGE,
        "tokenizer.json is not a tokenizer's tokenizer.json (a JSON object): it is binary",
    ),
    BadInput(
        "eval-tokenizer-json-not-a-tokenizer",
        "evaluation",
        _eval(edited_model("tokenizer_other", garbage("tokenizer.json", b'{"version": "1.0"}'))),
        EXIT_USAGE,
        "its tokenizer files do not load",
    ),
    BadInput(
        "eval-tokenizer-own-code",
        "evaluation",
        _eval(edited_model("tokenizer_code", tokenizer_with_own_code)),
        EXIT_USAGE,
        "asks for the directory's own tokenizer code (auto_map: tokenization_mine.MineTokenizer) and its "
        "tokenizer_class 'Mine' is not one of transformers' tokenizers; this project never runs a model's code (no "
        "trust_remote_code)",
    ),
    BadInput(
        "eval-model-hub-id",
        "evaluation",
        lambda ctx: [*EVAL, "--model", HUB_ID, "--out", str(ctx.tmp / "out")],
        EXIT_USAGE,
        "is not a local directory; this project loads local model directories only",
    ),
    BadInput(  # a misspelt local path looks like org/name, but is no hub id: no download hint
        "eval-model-misspelt-local-path",
        "evaluation",
        lambda ctx: [*EVAL, "--model", "models/no-such-model", "--out", str(ctx.tmp / "out")],
        EXIT_USAGE,
        "--model 'models/no-such-model': no such directory; pass a local HF model directory",
    ),
    BadInput(
        "eval-model-misspelt-names-its-sibling",
        "evaluation",
        lambda ctx: [*EVAL, "--model", _misspelt_model(ctx), "--out", str(ctx.tmp / "out")],
        EXIT_USAGE,
        "no such directory (did you mean '{tmp}/models/smollm2-135m-instruct'?)",
    ),
    BadInput(
        "eval-data-gz-not-gzip",
        "evaluation",
        _kv_file(KV_LINES, "kv-retrieval-2_keys.jsonl.gz"),
        EXIT_USAGE,
        "kv-retrieval-2_keys.jsonl.gz is not a gzip file, though its name ends in .gz",
    ),
    BadInput(
        "eval-data-gz-truncated",
        "evaluation",
        _kv_file(gzip.compress(KV_LINES, mtime=0)[:-20], "kv-retrieval-2_keys.jsonl.gz"),
        EXIT_USAGE,
        "kv-retrieval-2_keys.jsonl.gz is a truncated or damaged gzip file",
    ),
    BadInput(
        "eval-data-binary-line",
        "evaluation",
        _kv_file(KV_LINES + b"\x00\xff\xfe\n"),
        EXIT_USAGE,
        "kv-retrieval-2_keys.jsonl:401 is not UTF-8 text (byte 0xff at column 2)",
    ),
    BadInput(
        "eval-records-garbage-line",
        "evaluation",
        _summarize_records(b"\n\xff\xfe not a record\n"),
        EXIT_USAGE,
        "records.jsonl:2 is not UTF-8 text (byte 0xff at column 1), so not a line this harness wrote",
    ),
    BadInput(
        "eval-lpes-scales-nested",
        "evaluation",
        _ev_lpes({"format_version": 1, "num_layers": 4, "scales": [[1.0, 1.0]] * 4}),
        EXIT_USAGE,
        "scales must be a list of finite numbers",
    ),
    BadInput(
        "eval-lpes-control-points-flat",
        "evaluation",
        _ev_lpes(scale_json(control_points=[0.0, 1.0, 2.0])),
        EXIT_USAGE,
        "control_points must be a list of [x, y] number pairs",
    ),
    BadInput(
        "eval-lpes-num-layers-text",
        "evaluation",
        _ev_lpes({"format_version": 1, "num_layers": "4", "scales": [1.0] * 4}),
        EXIT_USAGE,
        "num_layers must be a positive integer, got '4'",
    ),
    BadInput(
        "eval-lpes-top-level-list",
        "evaluation",
        _ev_lpes([1.0, 1.0, 1.0, 1.0]),
        EXIT_USAGE,
        "top level must be a JSON object, got list",
    ),
    BadInput(
        "eval-config-binary",
        "evaluation",
        lambda ctx: [
            "run",
            "--config",
            str(file_at("eval.yaml", b"\x89PNG\r\n\x1a\n\xff")(ctx)),
            "--out",
            str(ctx.tmp / "o"),
        ],
        EXIT_USAGE,
        "eval.yaml is not a YAML config file: it is binary, not UTF-8 text (byte 0x89 at offset 0)",
    ),
    BadInput(
        "eval-out-under-a-file",
        "evaluation",
        lambda ctx: [
            *EVAL,
            "--model",
            str(repo_model(ctx.tmp)),
            "--out",
            str(file_at("notes.txt", "mine\n")(ctx) / "o"),
        ],
        EXIT_USAGE,
        "notes.txt is a file, not a directory; pass another --out",
    ),
    BadInput(
        "summarize-summary-binary",
        "evaluation",
        _summarize_records(b"", summary=b"\xff\xfe\x00"),
        EXIT_USAGE,
        "summary.json is not a summary.json of this harness: it is binary, not UTF-8 text (byte 0xff at offset 0)",
    ),
    BadInput(
        "summarize-without-records",
        "evaluation",
        lambda ctx: ["summarize", "--out", str(file_at("out/summary.json", "{}")(ctx).parent)],
        EXIT_USAGE,
        "out has no records.jsonl, so there is nothing to re-summarise",
    ),
    BadInput(
        "report-summary-a-list",
        "evaluation",
        lambda ctx: ["report", "--out", str(file_at("out/summary.json", "[]")(ctx).parent)],
        EXIT_USAGE,
        "summary.json: expected a JSON object, got list",
    ),
    # -- files that exist but this user may not read: one line naming the file, never "No such file" (issue 24)
    BadInput(
        "eval-config-json-unreadable",
        "evaluation",
        denying(_eval(repo_model), "repo/config.json"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/config.json: permission denied",
    ),
    BadInput(
        "eval-weights-unreadable",
        "evaluation",
        denying(_eval(repo_model), "repo/model.safetensors"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/model.safetensors: permission denied",
    ),
    BadInput(
        "eval-tokenizer-unreadable",
        "evaluation",
        denying(_eval(repo_model), "repo/tokenizer.json"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/tokenizer.json: permission denied",
    ),
    BadInput(
        "eval-model-folder-not-enterable",
        "evaluation",
        denying(_eval(repo_model), "repo"),
        EXIT_USAGE,
        "cannot read {tmp}/repo: permission denied",
    ),
    BadInput(
        "eval-lpes-scale-file-unreadable",
        "evaluation",
        denying(_ev_lpes(scale_json()), "scales/s.json"),
        EXIT_USAGE,
        "cannot read {tmp}/scales/s.json: permission denied",
    ),
    BadInput(
        "eval-config-unreadable",
        "evaluation",
        denying(_ev_config("tasks: [kv]\n"), "eval.yaml"),
        EXIT_USAGE,
        "cannot read {tmp}/eval.yaml: permission denied",
    ),
    BadInput(
        "eval-data-file-unreadable",
        "evaluation",
        denying(_kv_file(KV_LINES), "data/kv-retrieval-2_keys.jsonl"),
        EXIT_USAGE,
        "cannot read {tmp}/data/kv-retrieval-2_keys.jsonl: permission denied",
    ),
    BadInput(
        "eval-earlier-manifest-unreadable",
        "evaluation",
        denying(_eval(repo_model), "out/run.json"),
        EXIT_USAGE,
        "cannot read {tmp}/out/run.json: permission denied",
    ),
    BadInput(
        "summarize-records-unreadable",
        "evaluation",
        denying(_summarize_records(b'{"id": "a"}\n'), "out/records.jsonl"),
        EXIT_USAGE,
        "cannot read {tmp}/out/records.jsonl: permission denied",
    ),
    BadInput(
        "report-summary-unreadable",
        "evaluation",
        denying(
            lambda ctx: ["report", "--out", str(file_at("out/summary.json", SUMMARY)(ctx).parent)], "out/summary.json"
        ),
        EXIT_USAGE,
        "cannot read {tmp}/out/summary.json: permission denied",
    ),
    BadInput(
        "eval-data-folder-not-enterable",
        "evaluation",
        denying(_kv_file(KV_LINES), "data"),
        EXIT_USAGE,
        "cannot read {tmp}/data: permission denied",
    ),
    # == rows: insert above this line ==
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row: BadInput, tmp_path, capsys, monkeypatch, one_thread):
    check_row(row, tmp_path, capsys, monkeypatch)


def test_an_evaluation_run_leaves_no_lock_and_no_directory_when_refused_early(tmp_path):
    from evaluation.runner import RunConfig, run

    out = tmp_path / "new"
    with pytest.raises(ValueError, match="unknown method"):
        run(RunConfig(out=str(out), tasks={"kv": {"num_examples": 1}}, methods=["no-such-method"]))
    assert not out.exists()


# ----------------------------------------------------------------------------- not command lines


NQ = NQ_OPEN_ORACLE


BOUNDED = """
import json, resource, sys, time
from pathlib import Path
from evaluation.generation import DecodeSettings, PromptsTooLongError
from evaluation.model_loading import tiny_default
from evaluation.runner import prepare_task

model, tokenizer = tiny_default()
statm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
cap = statm + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
params = {"num_keys": 75, "num_examples": 40, "gold_positions": "all", "seed": 0}
try:
    prepare_task("kv", params, model, tokenizer, DecodeSettings(max_new_tokens=8, max_length=2048))
    outcome = "accepted"
except ValueError as err:
    outcome = str(err)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start, "rss_growth": grown}))
"""


@pytest.mark.slow  # a fresh interpreter
def test_a_kv_task_too_long_for_the_model_is_refused_in_bounded_memory():
    """3,000 KV prompts of 75 keys (~6,200 tokens each) for a 2,048-token budget: refused in < 400 MB more.

    Before issue 13 every prompt was tokenised (with offsets) before the length
    check: ~1.2 MB a prompt, 3.6 GB here, 45 GB for the release's 75-key file at
    every position (37,500 prompts). Since 2026-11-26 the first prompt is
    tokenised before the grid is built, and its length refuses the task.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(2**30)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    message = report["outcome"]
    assert re.search(r"its first prompt has 6\d{3} tokens, so its prompts exceed the 2040-token prompt limit", message)
    assert "--truncate middle|left" in message
    assert report["rss_growth"] < 400 * 2**20, report  # ~220 MB: one call of ~87 prompts with offsets


def _mdqa_prompts(num_examples: int = 4) -> datasets.Dataset:
    task = build_task("mdqa", path=str(NQ), num_documents=3, num_examples=num_examples, gold_positions="all", seed=3)
    return task.build()


@pytest.mark.parametrize(("chunk_size", "chars"), [(1, None), (5, None), (256, None), (5, 3000), (256, 3000)])
def test_tokenize_and_fit_gives_the_prompts_of_tokenize_then_fit(chunk_size, chars, monkeypatch):
    """Same tokens, spans and truncation as one tokenizer call followed by `fit_to_length`; same refusal."""
    import evaluation.generation

    tokenizer = byte_tokenizer()
    dataset = _mdqa_prompts()
    prompts, spans = list(dataset["prompt"]), list(dataset["item_spans"])
    whole = tokenize_prompts(tokenizer, prompts, spans, chunk_size=len(prompts))
    lengths = sorted(len(p.input_ids) for p in whole)
    if chars is not None:  # calls of a few prompts (of 1,300-2,500 characters) within each chunk
        monkeypatch.setattr(evaluation.generation, "TOKENIZE_CHARS", chars)
    assert tokenize_prompts(tokenizer, prompts, spans, chunk_size=chunk_size) == whole
    for limit in (None, lengths[-1], lengths[len(lengths) // 2], lengths[0] - 1):
        for truncate in (None, "middle", "left"):
            try:
                expected = fit_to_length(whole, limit, truncate)
            except PromptsTooLongError as err:
                expected = str(err)
            try:
                got = tokenize_and_fit(tokenizer, dataset["prompt"], dataset["item_spans"], limit, truncate, chunk_size)
            except PromptsTooLongError as err:
                got = str(err)
            assert got == expected, (limit, truncate)


def test_task_build_in_chunks_equals_one_build(monkeypatch):
    from evaluation.tasks import base

    task = build_task("kv", num_keys=5, num_examples=4, gold_positions="all", seed=1)
    whole = datasets.Dataset.from_list(list(task.rows()), features=task.features())
    monkeypatch.setattr(base, "BUILD_CHUNK", 7)  # 20 rows: chunks of 7, 7, 6
    chunked = task.build()
    assert chunked.features == whole.features and chunked.to_list() == whole.to_list()


@pytest.mark.parametrize("name", ["records.jsonl", "summary.json", "run.json"])
def test_evaluation_on_a_full_disk_names_the_file(tmp_path, monkeypatch, capsys, name, one_thread):
    import evaluation.results
    import repo_common.atomic
    from evaluation.cli import main

    module = evaluation.results if name == "records.jsonl" else repo_common.atomic
    full_disk_on(monkeypatch, module, name)
    out = tmp_path / "out"
    code = main([*EVAL, "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "no --model" not in line]
    assert code == 2 and len(lines) == 1, lines
    assert f"No space left on device while writing {out / name}; free space" in lines[0]


def test_lpes_accepts_scales_alone_and_checks_a_curve_when_there_is_one(tmp_path):
    from evaluation.methods import MethodStack
    from evaluation.methods.lpes.scale_file_format import ScaleFileError

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5]}))
    MethodStack.parse(f"lpes:scale_file={bare}")  # hand-made scales: fine
    linear = {"curve": {"type": "linear", "degree": 1}, "control_points": [[0, 1.0], [1, 1.5]]}
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5], **linear}))
    MethodStack.parse(f"lpes:scale_file={bare}")  # scales on the curve: fine
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.4], **linear}))
    with pytest.raises(ScaleFileError, match=r"^lpes: scale file .* scales differ from the linear curve"):
        MethodStack.parse(f"lpes:scale_file={bare}")
    bare.write_text(json.dumps({"format_version": 1, "num_layers": 2, "scales": [1.0, 1.5], "curve": linear["curve"]}))
    with pytest.raises(ScaleFileError, match=r"has curve but lacks \['control_points'\]"):
        MethodStack.parse(f"lpes:scale_file={bare}")


def test_a_data_file_of_one_huge_line_is_refused_without_reading_it_whole(tmp_path, capsys, monkeypatch, one_thread):
    """A 3 MB one-line KV file under a 1 MiB line cap (the real cap is 64 MiB, for multi-GB files): one line
    naming the file and the line, and no more than the cap (+1 byte) is ever read into memory at once."""
    import repo_common.json_files

    monkeypatch.setattr(repo_common.json_files, "MAX_LINE_BYTES", 2**20)
    longest = []

    class Watched:
        """A file whose readline results' lengths are kept in `longest`."""

        def __init__(self, handle):
            self._handle = handle

        def readline(self, size=-1):
            line = self._handle.readline(size)
            longest.append(len(line))
            return line

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    monkeypatch.setattr(repo_common.json_files, "open", lambda *a, **k: Watched(open(*a, **k)), raising=False)  # noqa: SIM115
    huge = b'{"ordered_kv_records": [["k", "' + b"v" * 3_000_000 + b'"]], "key": "k", "value": "v"}\n'
    row = BadInput(
        "eval-data-one-huge-line",
        "evaluation",
        _kv_file(huge),
        EXIT_USAGE,
        "kv-retrieval-2_keys.jsonl:1 is longer than 1,048,576 bytes: a JSON-lines file holds one example a line",
    )
    check_row(row, tmp_path, capsys, monkeypatch)
    assert max(longest) == 2**20 + 1  # the cap and one byte: never the 3 MB line


def test_a_ruler_tokenizer_directory_with_its_own_code_is_refused(tmp_path):
    """A RULER task's `tokenizer` directory (Python API) is checked like a model's: its own code is never run."""
    tokenizer = with_tokenizer(tmp_path / "tokenizer")
    tokenizer_with_own_code(tokenizer)
    with pytest.raises(ValueError, match=r"tokenizer_config.json asks for the directory's own tokenizer code"):
        build_task("ruler_niah_single", num_examples=1, tokenizer=str(tokenizer)).build()
