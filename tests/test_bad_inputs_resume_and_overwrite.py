"""Nothing silently mixed, nothing written over, no wrong artefact accepted (issue 24, "Robust II").

`ROWS` extends the bad-input tables (tests/test_bad_inputs_*.py) with the cases
that were silently wrong or destructive: a run directory resumed with other
weights, tokenizer or scale file, records without their run.json, outputs
over files the project did not write, a scale file of another model or of
absurd scales, `pi` on a model without RoPE, `report --seeds` over different
setups, `fit` started afresh beside an earlier run's checkpoint. Each row
checks the exit code, a phrase of the one stderr line, that every file that
existed before is byte-identical afterwards and that nothing was added
(`tree_bytes`), and, where it says so, more (`check`: e.g. that the records
of an earlier run are still that run's alone).

Below the table: what must still work (an older run.json resumes with a
one-time note, a deliberate cross-model scale file, a search killed before its
first generation resuming, a re-export over an export).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from bad_input_helpers import (
    EVAL,
    TINY_SEARCH,
    VOCAB,
    BadInput,
    Context,
    check_row,
    lightning_like,
    run_cli,
    scale_json,
    tree_bytes,
    with_tokenizer,
)

from evaluation.results import build_summary, write_json_atomic
from repo_common.cli_errors import EXIT_USAGE
from repo_common.run_lock import LOCK_FILE
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from workflows.cli import main as workflows_main
from workflows.quickstart.command import check_out

# ----------------------------------------------------------------------------- helpers


def tiny_model(tmp: Path, name: str, method: str = "rope", seed: int = 0) -> Path:
    """A tiny OLMo-2 (4 layers) with `method` positions and the byte tokenizer, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    model = RePoOlmo2ForCausalLM(tiny(vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, position_method=method))
    model.save_pretrained(tmp / name)
    return with_tokenizer(tmp / name)


def records_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]


def _eval_argv(ctx: Context, model: Path, *extra: str) -> list[str]:
    return [*EVAL, *extra, "--model", str(model), "--out", str(ctx.tmp / "out")]


def _stopped_run(edit: Callable[[Context], None], *extra: str, method: str = "rope"):
    """An earlier run of the command stopped after one record, then `edit(ctx)` (replace a file), then the same
    command: the rerun must not resume into those records."""

    def setup(ctx: Context) -> list[str]:
        argv = _eval_argv(ctx, tiny_model(ctx.tmp, "model", method), *extra)
        assert run_cli("evaluation", [*argv, "--max_records", "1"]) == 3
        ctx.first_records = records_of(ctx.tmp / "out")
        edit(ctx)
        return argv

    return setup


def _stopped_lpes_run(ctx: Context) -> list[str]:
    """An earlier lpes run stopped after one record, then its scale file replaced at the same path."""
    spec = f"lpes:scale_file={_scale_file_at(ctx, [1.2] * 4)}"
    return _stopped_run(_replace_scale_file, "--methods", spec)(ctx)


def _kv_file(ctx: Context, value: str) -> Path:
    """ctx.tmp/data/kv-retrieval-2_keys.jsonl in the release's format: 4 examples of 2 pairs, values `value`-i-k."""
    data = ctx.tmp / "data"
    data.mkdir(exist_ok=True)
    lines = []
    for index in range(4):
        pairs = [[f"key-{index}-{k}", f"{value}-{index}-{k}"] for k in range(2)]
        lines.append(json.dumps({"ordered_kv_records": pairs, "key": pairs[1][0], "value": pairs[1][1]}))
    (data / "kv-retrieval-2_keys.jsonl").write_text("\n".join(lines) + "\n")
    return data


def _stopped_data_run(ctx: Context) -> list[str]:
    """An earlier run on a release file stopped after one record, then the file replaced at the same path."""
    import evaluation.runner

    def replace(ctx: Context) -> None:
        _kv_file(ctx, "other")
        evaluation.runner._DATASETS.clear()  # a new process builds the task again; this one has it in memory
        evaluation.runner._TOKENS_CACHE.clear()

    return _stopped_run(replace, "--data_dir", str(_kv_file(ctx, "value")))(ctx)


def _only_the_first_run(ctx: Context) -> None:
    """The records are those the first run wrote (one), none of the rerun's."""
    assert records_of(ctx.tmp / "out") == ctx.first_records and len(ctx.first_records) == 1


def _other_weights(ctx: Context) -> None:
    """model.safetensors replaced at the same path by the same shape drawn from another seed."""
    other = tiny_model(ctx.tmp, "other", seed=1)
    shutil.copyfile(other / "model.safetensors", ctx.tmp / "model" / "model.safetensors")
    shutil.rmtree(other)


def _lowercasing_tokenizer(ctx: Context) -> None:
    """tokenizer.json replaced by one that lowercases first (same vocabulary, other tokens)."""
    path = ctx.tmp / "model" / "tokenizer.json"
    data = json.loads(path.read_text())
    data["normalizer"] = {"type": "Lowercase"}
    path.write_text(json.dumps(data))


def _scale_file_at(ctx: Context, scales: list[float], **model) -> Path:
    path = ctx.tmp / "scales.json"
    record = {"name": "tiny", "config_sha256": "0" * 64, **model}
    data = scale_json(curve={"type": "none", "degree": None}, control_points=[], scales=scales, model=record)
    path.write_text(json.dumps(data))
    return path


def _lpes_run(scales: list[float], **model) -> Callable[[Context], list[str]]:
    def setup(ctx: Context) -> list[str]:
        path = _scale_file_at(ctx, scales, **model)
        return _eval_argv(
            ctx, tiny_model(ctx.tmp, "model"), "--methods", "baseline", "--methods", f"lpes:scale_file={path}"
        )

    return setup


def _replace_scale_file(ctx: Context) -> None:
    _scale_file_at(ctx, [1.5] * 4)


def _user_folder(ctx: Context) -> Path:
    folder = ctx.tmp / "out"
    folder.mkdir()
    (folder / "config.yaml").write_text("my: own settings\n")
    (folder / "report.md").write_text("# my notes\n")
    return folder


def _summarized_run(ctx: Context, name: str = "out", num_keys: int = 2, model: str = "tiny", config: str = "c") -> Path:
    """A run directory with records.jsonl and the summary.json built from them (no model run needed)."""
    out = ctx.tmp / name
    out.mkdir()
    records = [
        {"id": f"q{q}-p{p}", "example_id": f"q{q}", "task": "kv", "method": "baseline", "gold_position": p,
         "num_positions": 2, "prediction": "x", "answers": ["x"], "score": float((q + p) % 2), "prompt_tokens": 9,
         "truncated": False}
        for q in range(4) for p in range(2)
    ]  # fmt: skip
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tasks = {"kv": {"params": {"num_keys": num_keys, "seed": 0}, "metric": "kv_containment"}}
    summary = build_summary(records, {"name": model, "class": "X", "config_sha256": config}, tasks, ["baseline"])
    write_json_atomic(out / "summary.json", {**summary, "decode": {"batch_size": 8}})
    return out


def _tiny_search(ctx: Context) -> Path:
    """The outputs of a finished `search run` of configs/search/tiny.yaml, in ctx.tmp/scales (run once, copied)."""
    if not SEARCH_CACHE:
        cache = ctx.tmp.parent / "tiny-search-cache"
        argv = ["run", "--config", TINY_SEARCH, "--out", str(cache / "s.json"), "--no_progress"]
        assert run_cli("search", argv) == 0
        SEARCH_CACHE.append(cache)
    shutil.copytree(SEARCH_CACHE[0], ctx.tmp / "scales")
    config = ctx.tmp / "scales" / "s.config.yaml"  # the config names its --out: this copy's
    config.write_text(config.read_text().replace(str(SEARCH_CACHE[0]), str(ctx.tmp / "scales")))
    return ctx.tmp / "scales" / "s.json"


SEARCH_CACHE: list[Path] = []
FULL_SCALE = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart" / "olmo2-1b.yaml")


def _search_argv(ctx: Context, *extra: str) -> list[str]:
    return ["run", "--config", TINY_SEARCH, "--out", str(ctx.tmp / "scales" / "s.json"), "--no_progress", *extra]


def _in_scales(name: str, text: str) -> Callable[[Context], list[str]]:
    def setup(ctx: Context) -> list[str]:
        (ctx.tmp / "scales").mkdir()
        (ctx.tmp / "scales" / name).write_text(text)
        return _search_argv(ctx)

    return setup


def _hf_directory(ctx: Context) -> Path:
    """Another model's HF directory: weights, config, tokenizer, a README and notes."""
    path = tiny_model(ctx.tmp, "hf")
    (path / "README.md").write_text("# a model card\n")
    (path / "notes.txt").write_text("how I trained it\n")
    return path


def _export_argv(ctx: Context, out: str) -> list[str]:
    return ["export", "--checkpoint", str(lightning_like(ctx.tmp / "run.ckpt")), "--out", out, "--no_tokenizer"]


def _earlier_fit_root(name: str) -> Callable[[Context], list[str]]:
    """A training root whose version_0 holds the checkpoint `name` of an earlier run."""

    def setup(ctx: Context) -> list[str]:
        checkpoints = ctx.tmp / "run" / "lightning_logs" / "version_0" / "checkpoints"
        checkpoints.mkdir(parents=True)
        (checkpoints / name).write_bytes(b"an earlier run's checkpoint")
        return ["fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(ctx.tmp / "run")]

    return setup


# ----------------------------------------------------------------------------- the table


ROWS = [
    # -- a run directory pins what its records depend on
    BadInput(
        "eval-resume-weights-replaced",
        "evaluation",
        _stopped_run(_other_weights),
        EXIT_USAGE,
        "other settings (differs in weights.model.safetensors)",
        check=_only_the_first_run,
    ),
    BadInput(
        "eval-resume-tokenizer-replaced",
        "evaluation",
        _stopped_run(_lowercasing_tokenizer),
        EXIT_USAGE,
        "other settings (differs in tokenizer)",
        check=_only_the_first_run,
    ),
    BadInput(
        "eval-resume-scale-file-replaced",
        "evaluation",
        _stopped_lpes_run,
        EXIT_USAGE,
        "other settings (differs in methods.lpes:scale_file=",
        check=_only_the_first_run,
    ),
    BadInput(
        "eval-resume-data-file-replaced",
        "evaluation",
        _stopped_data_run,
        EXIT_USAGE,
        "other settings (differs in tasks.kv.prompts_sha256: the same task settings give other prompts",
        check=_only_the_first_run,
    ),
    BadInput(
        "eval-records-without-run-json",
        "evaluation",
        _stopped_run(lambda ctx: (ctx.tmp / "out" / "run.json").unlink()),
        EXIT_USAGE,
        "holds records (records.jsonl) but no run.json",
        check=_only_the_first_run,
    ),
    BadInput(
        "eval-rank-records-without-run-json",
        "evaluation",
        _stopped_run(
            lambda ctx: [
                (ctx.tmp / "out" / "records.jsonl").rename(ctx.tmp / "out" / "records.rank1.jsonl"),
                (ctx.tmp / "out" / "run.json").unlink(),
            ]
        ),
        EXIT_USAGE,
        "holds records (records.rank1.jsonl) but no run.json",
    ),
    # -- outputs never written over files the project did not write
    BadInput(
        "eval-out-user-folder",
        "evaluation",
        lambda ctx: [*EVAL, "--model", str(tiny_model(ctx.tmp, "model")), "--out", str(_user_folder(ctx))],
        EXIT_USAGE,
        "is a non-empty directory that this command did not write (config.yaml, report.md; has no run.json",
    ),
    BadInput(
        "eval-out-empty",
        "evaluation",
        lambda ctx: [*EVAL, "--model", str(tiny_model(ctx.tmp, "model")), "--out", ""],
        EXIT_USAGE,
        "--out is empty",
    ),
    BadInput(
        "eval-out-dangling-link",
        "evaluation",
        lambda ctx: [*EVAL, "--model", str(tiny_model(ctx.tmp, "model")), "--out", str(_dangling(ctx))],
        EXIT_USAGE,
        "is a symbolic link",
    ),
    BadInput(
        "search-out-unrelated-json",
        "search",
        _in_scales("s.json", '{"my": "data"}\n'),
        EXIT_USAGE,
        "s.json exists and is not the scale file of a search that can continue (no s.state.json)",
    ),
    BadInput(
        "search-out-log-without-state",
        "search",
        _in_scales("s.log.jsonl", '{"generation": 0}\n'),
        EXIT_USAGE,
        "s.log.jsonl exists and is not an output of a search that can continue",
    ),
    BadInput(
        "search-out-other-config",
        "search",
        _in_scales("s.config.yaml", "my: own notes\n"),
        EXIT_USAGE,
        "s.config.yaml exists and is not an output of a search",
    ),
    BadInput(
        "search-out-resume-without-state",
        "search",
        lambda ctx: [*_in_scales("s.json", '{"my": "data"}\n')(ctx), "--resume"],
        EXIT_USAGE,
        "s.json exists and is not the scale file",
    ),
    BadInput(
        "search-out-is-a-directory",
        "search",
        lambda ctx: (ctx.tmp / "scales" / "s.json").mkdir(parents=True) or _search_argv(ctx),
        EXIT_USAGE,
        "s.json is a directory, not a file",
    ),
    BadInput(
        "search-out-empty",
        "search",
        lambda ctx: ["run", "--config", TINY_SEARCH, "--out", ""],
        EXIT_USAGE,
        "--out is empty",
    ),
    BadInput(
        "diagnose-out-user-folder",
        "search",
        lambda ctx: [
            "diagnose",
            "--config",
            TINY_SEARCH,
            "--scale_file",
            str(_scale_file_at(ctx, [1.0] * 4)),
            "--out",
            str(_user_folder(ctx)),
        ],
        EXIT_USAGE,
        "has no structure.json",
    ),
    BadInput(
        "export-over-another-hf-directory",
        "repo_train",
        lambda ctx: _export_argv(ctx, str(_hf_directory(ctx))),
        EXIT_USAGE,
        "is a non-empty directory that this command did not write (README.md, config.json",
    ),
    BadInput(
        "export-over-a-forged-manifest",
        "repo_train",
        lambda ctx: _export_argv(ctx, str(_forged_export(ctx))),
        EXIT_USAGE,
        "its export.json is not an earlier export's",
    ),
    BadInput("export-out-empty", "repo_train", lambda ctx: _export_argv(ctx, ""), EXIT_USAGE, "--out is empty"),
    BadInput("summarize-out-empty", "evaluation", lambda ctx: ["summarize", "--out", ""], EXIT_USAGE, "--out is empty"),
    BadInput(
        "report-compare-empty",
        "evaluation",
        lambda ctx: ["report", "--out", str(_summarized_run(ctx)), "--compare", ""],
        EXIT_USAGE,
        "--compare is empty",
    ),
    BadInput(
        "diagnose-out-empty",
        "search",
        lambda ctx: [
            "diagnose",
            "--config",
            TINY_SEARCH,
            "--scale_file",
            str(_scale_file_at(ctx, [1.0] * 4)),
            "--out",
            "",
        ],
        EXIT_USAGE,
        "--out is empty",
    ),
    BadInput(
        "real-model-out-other-folder",
        "repo_train",
        lambda ctx: ["real-model", "--out", str(_user_folder(ctx))],
        EXIT_USAGE,
        "has no provenance.json",
    ),
    BadInput(
        "summarize-empty-records",
        "evaluation",
        lambda ctx: ["summarize", "--out", str(_emptied(_summarized_run(ctx))), "--no_report"],
        EXIT_USAGE,
        "holds no records of the tasks and methods in",
    ),
    BadInput(
        "summarize-under-a-running-run",
        "evaluation",
        lambda ctx: ["summarize", "--out", str(_held(ctx, _summarized_run(ctx))), "--no_report"],
        EXIT_USAGE,
        "is in use by pid",
    ),
    # -- wrong artefacts
    BadInput(
        "eval-lpes-other-model-config",
        "evaluation",
        _lpes_run([1.5] * 4, identity_sha256="0123456789abcdef"),
        EXIT_USAGE,
        "was searched for another model (tiny; differs in config (sha256 0123456789abcdef in the file",
    ),
    BadInput(
        "eval-lpes-other-model-weights",
        "evaluation",
        _lpes_run([1.5] * 4, weight_files={"model.safetensors": {"size": 1, "sha256": "f" * 32}}),
        EXIT_USAGE,
        "pass --allow_other_model_scales to apply it deliberately",
    ),
    BadInput(
        "eval-lpes-tiny-default-scales-on-a-model",
        "evaluation",
        _lpes_run([1.5] * 4, weight_files={"tiny_default_seed": 0}),
        EXIT_USAGE,
        "weights (the tiny default of seed 0 in the file",
    ),
    BadInput(
        "eval-lpes-scales-1e300",
        "evaluation",
        _lpes_run([1e300] * 4),
        EXIT_USAGE,
        "scales must lie within [0.001, 1000]",
    ),
    BadInput(
        "eval-lpes-scales-tiny", "evaluation", _lpes_run([1e-9] * 4), EXIT_USAGE, "got (layer, scale) [(0, 1e-09)"
    ),
    BadInput(
        "eval-pi-scale-1e300",
        "evaluation",
        lambda ctx: _eval_argv(ctx, tiny_model(ctx.tmp, "model"), "--methods", "pi:scale=1e300"),
        EXIT_USAGE,
        "pi: layer 0's scale must be a finite number within [0.001, 1000]",
    ),
    BadInput(
        "eval-pi-stacked-beyond-range",
        "evaluation",
        lambda ctx: _eval_argv(ctx, tiny_model(ctx.tmp, "model"), "--methods", "pi:scale=100+pi:scale=100"),
        EXIT_USAGE,
        "got 10000.0",
    ),
    BadInput(
        "eval-pi-on-nope-model",
        "evaluation",
        lambda ctx: _eval_argv(ctx, tiny_model(ctx.tmp, "model", "nope"), "--methods", "pi:scale=2"),
        EXIT_USAGE,
        "pi scales RoPE positions, but none of the model's 4 layers uses RoPE",
    ),
    BadInput(
        "eval-lpes-on-nope-model",
        "evaluation",
        lambda ctx: _eval_argv(
            ctx, tiny_model(ctx.tmp, "model", "nope"), "--methods", f"lpes:scale_file={_scale_file_at(ctx, [2.0] * 4)}"
        ),
        EXIT_USAGE,
        "lpes scales RoPE positions, but none of the model's 4 layers uses RoPE",
    ),
    BadInput(
        "report-seeds-other-task-settings",
        "evaluation",
        lambda ctx: [
            "report",
            "--out",
            str(_summarized_run(ctx, "a")),
            "--compare",
            str(_summarized_run(ctx, "b", num_keys=3)),
            "--seeds",
        ],
        EXIT_USAGE,
        "is not a seed of the setup of",
    ),
    BadInput(
        "report-seeds-other-model",
        "evaluation",
        lambda ctx: [
            "report",
            "--out",
            str(_summarized_run(ctx, "a")),
            "--compare",
            str(_summarized_run(ctx, "b", model="other", config="d")),
            "--seeds",
        ],
        EXIT_USAGE,
        "(differs in model.config_sha256)",
    ),
    BadInput(
        "report-seeds-same-run-twice",
        "evaluation",
        lambda ctx: [
            "report",
            "--out",
            str(_summarized_run(ctx, "a")),
            "--compare",
            str(ctx.tmp / "." / "a"),
            "--seeds",
        ],
        EXIT_USAGE,
        "which would count one seed twice",
    ),
    # -- with a real search's outputs (configs/search/tiny.yaml, run once for the module)
    BadInput(
        "search-resume-other-settings-keeps-config",
        "search",
        lambda ctx: _tiny_search(ctx) and _search_argv(ctx, "--resume", "--ga.seed", "5"),
        EXIT_USAGE,
        "used other GA settings ['seed']",
    ),
    BadInput(
        "search-rerun-after-state-deleted",
        "search",
        lambda ctx: _without_state(_tiny_search(ctx)) and _search_argv(ctx),
        EXIT_USAGE,
        "s.json exists and is not the scale file of a search that can continue (no s.state.json)",
    ),
    BadInput(
        "eval-searched-scales-on-another-model",
        "evaluation",
        lambda ctx: _eval_argv(ctx, tiny_model(ctx.tmp, "model"), "--methods", f"lpes:scale_file={_tiny_search(ctx)}"),
        EXIT_USAGE,
        "weights (the tiny default of seed 0 in the file",
    ),
    BadInput(
        "diagnose-scales-of-another-model",
        "search",
        lambda ctx: [
            "diagnose",
            "--config",
            TINY_SEARCH,
            "--model.path",
            str(tiny_model(ctx.tmp, "model")),
            "--scale_file",
            str(_tiny_search(ctx)),
            "--out",
            str(ctx.tmp / "diag"),
        ],
        EXIT_USAGE,
        "was searched for another model (tiny-default(seed=0); differs in config (sha256",
    ),
    # -- options the tiny default would ignore (and a config record as used)
    BadInput(
        "search-dtype-without-model",
        "search",
        lambda ctx: _search_argv(ctx, "--model.dtype", "int8"),
        EXIT_USAGE,
        "--model.dtype int8 applies to a model loaded from a directory, and none is given",
    ),
    BadInput(
        "search-attention-without-model",
        "search",
        lambda ctx: _search_argv(ctx, "--model.attn_implementation", "eager"),
        EXIT_USAGE,
        "--model.attn_implementation eager applies to a model loaded from a directory",
    ),
    BadInput(
        "eval-dtype-without-model",
        "evaluation",
        lambda ctx: [*EVAL, "--dtype", "bfloat16", "--out", str(ctx.tmp / "out")],
        EXIT_USAGE,
        "--dtype bfloat16 applies to a model loaded from a directory",
    ),
    BadInput(
        "validate-without-checkpoint-or-data",
        "repo_train",
        lambda ctx: ["validate", "--trainer.default_root_dir", str(ctx.tmp / "run")],
        EXIT_USAGE,
        "validate needs --data.val SOURCE (the data to validate on) and --ckpt_path CKPT or --model.init_from DIR",
    ),
    # -- training restarted silently
    BadInput(
        "fit-afresh-beside-last-ckpt",
        "repo_train",
        _earlier_fit_root("last.ckpt"),
        EXIT_USAGE,
        "holds an earlier run's checkpoint",
    ),
    BadInput(
        "fit-afresh-beside-a-step-checkpoint",
        "repo_train",
        _earlier_fit_root("step=3.ckpt"),
        EXIT_USAGE,
        "version_0/checkpoints/step=3.ckpt, which is damaged",  # found beside last.ckpt, and judged
    ),
]


def _without_state(scale_file: Path) -> Path:
    """A finished search whose state file (and its timing) is gone: nothing left to continue."""
    for suffix in (".state.json", ".state.json.timing.json"):
        scale_file.with_name(scale_file.stem + suffix).unlink(missing_ok=True)
    return scale_file


def _dangling(ctx: Context) -> Path:
    (ctx.tmp / "link").symlink_to(ctx.tmp / "nowhere")
    return ctx.tmp / "link"


def _forged_export(ctx: Context) -> Path:
    path = _hf_directory(ctx)
    (path / "export.json").write_text('{"written_by": "someone else"}\n')
    return path


def _emptied(out: Path) -> Path:
    (out / "records.jsonl").write_text("")
    return out


def _held(ctx: Context, out: Path) -> Path:
    ctx.hold(out / LOCK_FILE)
    return out


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_refused_before_any_write(row: BadInput, tmp_path, capsys, monkeypatch, one_thread):
    check_row(row, tmp_path / "row", capsys, monkeypatch)  # in a subdirectory: some rows share files beside it


# ----------------------------------------------------------------------------- what must still work


def test_an_older_run_json_resumes_once_with_a_note_and_gives_a_clean_runs_records(tmp_path, capsys, one_thread):
    """run.json without the pinned keys (an older version's): resumed, said once, then pinned; the records equal
    an uninterrupted run's byte for byte."""
    model = tiny_model(tmp_path, "model")
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    assert run_cli("evaluation", [*EVAL, "--model", str(model), "--out", str(clean)]) == 0
    argv = [*EVAL, "--model", str(model), "--out", str(resumed)]
    assert run_cli("evaluation", [*argv, "--max_records", "1"]) == 3
    manifest = json.loads((resumed / "run.json").read_text())
    for key in ("weights", "tokenizer", "methods"):
        del manifest[key]
    (resumed / "run.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run_cli("evaluation", argv) == 0
    assert capsys.readouterr().err.count("did not pin weights, tokenizer, methods (the weights were not pinned)") == 1
    assert json.loads((resumed / "run.json").read_text())["weights"]["model.safetensors"]["size"] > 0
    assert run_cli("evaluation", argv) == 0  # pinned now: no note
    assert "did not pin" not in capsys.readouterr().err
    assert (resumed / "records.jsonl").read_bytes() == (clean / "records.jsonl").read_bytes()


def test_a_run_made_before_the_grids_were_renamed_resumes_under_the_new_name(tmp_path, one_thread):
    """run.json naming the grid 'caliope' (an older version's): the same positions as 'ends-20-50-80', so resumed."""
    model = tiny_model(tmp_path, "model")
    argv = [*EVAL, "--gold_positions", "ends-20-50-80", "--model", str(model), "--out", str(tmp_path / "out")]
    assert run_cli("evaluation", [*argv, "--max_records", "1"]) == 3
    manifest = json.loads((tmp_path / "out" / "run.json").read_text())
    assert manifest["tasks"]["kv"]["params"]["gold_positions"] == "ends-20-50-80"
    manifest["tasks"]["kv"]["params"]["gold_positions"] = "caliope"
    (tmp_path / "out" / "run.json").write_text(json.dumps(manifest))
    assert run_cli("evaluation", argv) == 0
    assert len(records_of(tmp_path / "out")) == 4  # 2 examples x gold positions 0 and 1 (2 keys), none twice
    assert json.loads((tmp_path / "out" / "run.json").read_text())["tasks"]["kv"]["params"]["gold_positions"] == (
        "ends-20-50-80"
    )


def test_a_scale_file_of_another_model_applies_when_asked(tmp_path, capsys, one_thread):
    ctx = Context(tmp_path)
    argv = _lpes_run([1.5] * 4, identity_sha256="0123456789abcdef")(ctx)
    capsys.readouterr()
    assert run_cli("evaluation", [*argv, "--allow_other_model_scales"]) == 0
    err = capsys.readouterr().err
    assert "was searched for another model" in err and "applied anyway (--allow_other_model_scales)" in err
    assert {r["method"] for r in records_of(tmp_path / "out")} == {
        "baseline",
        f"lpes:scale_file={tmp_path}/scales.json",
    }


def test_a_search_killed_before_its_first_generation_may_continue(tmp_path):
    """Only its own NAME.config.yaml (whose `out` is this scale file) may be there without a state file."""
    from search.outputs import check_search_outputs

    scales = tmp_path / "scales"
    scales.mkdir()
    config = scales / "s.config.yaml"
    config.write_text(f"ga: {{}}\ntask: {{}}\nout: {scales / 's.json'}\n")
    assert check_search_outputs(scales / "s.json", resume=True)["config"] == config
    assert check_search_outputs(scales / "s.json", resume=False)["config"] == config
    config.write_text(f"ga: {{}}\ntask: {{}}\nout: {scales / 'other.json'}\n")  # another search's config
    with pytest.raises(ValueError, match="s.config.yaml exists and is not an output of a search"):
        check_search_outputs(scales / "s.json", resume=True)


def test_an_export_replaces_its_own_earlier_export(tmp_path):
    from repo_train.export import export_checkpoint

    checkpoint = lightning_like(tmp_path / "run.ckpt")
    export_checkpoint(checkpoint, tmp_path / "hf", with_tokenizer=False)
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"stale")
    export_checkpoint(checkpoint, tmp_path / "hf", with_tokenizer=False)
    manifest = json.loads((tmp_path / "hf" / "export.json").read_text())
    assert manifest["written_by"] == "python -m repo_train export" and manifest["checkpoint"] == str(checkpoint)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() != b"stale"


def test_the_quickstart_writes_only_into_its_own_output(tmp_path, capsys):
    """A folder of other files, a file, or `--out ''` is refused before anything is written; an earlier
    quickstart's (steps.json, or only the commands.sh of a run killed before its first step) is taken."""
    folder = _user_folder(Context(tmp_path))
    before = tree_bytes(tmp_path)
    for given in (str(folder), str(folder / "report.md"), ""):
        capsys.readouterr()
        assert workflows_main(["quickstart", "--config", FULL_SCALE, "--dry_run", "--out", given]) == EXIT_USAGE
        assert capsys.readouterr().err.startswith("python -m workflows quickstart: error: --out")
    assert tree_bytes(tmp_path) == before
    header = "#!/usr/bin/env bash\n# The commands of loop.yaml, in order.\n"
    for manifest, text in (("steps.json", "{}\n"), ("commands.sh", header)):
        earlier = tmp_path / manifest.replace(".", "-")
        earlier.mkdir()
        (earlier / manifest).write_text(text)
        (earlier / "report.md").write_text("# the quickstart's report\n")
        check_out(str(earlier), earlier)  # taken: no exception


@pytest.mark.parametrize(
    ("before", "after", "phrase"),
    [
        ('"caliope:calibrator=hourglass", fim,', '"caliope:calibrator=hourglass", fimm,', "unknown method 'fimm'"),
        ('"lpes:scale_file={scale_file}"', '"lpes:scale_fil={scale_file}"', "unknown parameter(s) ['scale_fil']"),
        ('--num_keys, "50"', '--num_keyz, "50"', "unrecognized arguments: --num_keyz 50"),
        ('"mdqa_release,kv"', '"mdqa_release,kvv"', "kvv"),
        ("args: [--task.name, mdqa,", "args: [--task.name, mdqq,", "task.name 'mdqq' is not a registered task"),
        ("args: [--task.name, mdqa,", "args: [--task.name, mdqa, --ga.populaton, '8',", "--ga.populaton"),
    ],
)
def test_a_loop_files_dry_run_checks_every_evaluation(tmp_path, capsys, before, after, phrase):
    """A typo in a method, its parameters or the harness options fails the dry run, not the GPU run hours later."""
    loop = Path(FULL_SCALE).read_text()
    assert before in loop
    (tmp_path / "loop.yaml").write_text(loop.replace(before, after))
    argv = ["quickstart", "--config", str(tmp_path / "loop.yaml"), "--dry_run", "--out", str(tmp_path / "qs")]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        workflows_main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == EXIT_USAGE and len(lines) == 1 and phrase in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.yaml"]  # nothing written


def test_a_scale_file_that_records_no_model_is_applied_with_a_note(tmp_path, capsys, one_thread):
    """A hand-made file (no identity_sha256 or weight_files) cannot be checked: the run says so, never silently."""
    argv = _lpes_run([1.5] * 4)(Context(tmp_path))
    capsys.readouterr()
    assert run_cli("evaluation", argv) == 0
    assert "records no model identity" in capsys.readouterr().err
