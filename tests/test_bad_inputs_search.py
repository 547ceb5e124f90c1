"""Bad inputs to `python -m search` are refused in one line and leave earlier outputs byte-identical.

`ROWS` is the search part of the bad-input table (issue 13; the row and the
check are in tests/bad_input_helpers.py). Add a row per new bad input. Below
the table: a full disk naming the state file, the fitness context including the
metric, the held-out default.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_input_helpers import (
    ALIAS_BOMB,
    HUB_ID,
    TINY_SEARCH,
    BadInput,
    Context,
    check_row,
    damaged_weights,
    denying,
    edited_model,
    file_at,
    full_disk_on,
    garbage,
    gpt2_model,
    llama_as_olmo2,
    repo_model,
    scale_file_at,
    scale_json,
    tmp_args,
    tokenizer_with_own_code,
)

from repo_common.cli_errors import EXIT_USAGE


def _search(model: Callable[[Path], Path]) -> Callable[[Context], list[str]]:
    return lambda ctx: ["run", "--model.path", str(model(ctx.tmp)), "--out", str(ctx.tmp / "scales" / "s.json")]


def _locked_search(ctx: Context) -> list[str]:
    scales = ctx.tmp / "scales"
    scales.mkdir()
    (scales / "s.state.json").write_text('{"earlier": true}\n')
    ctx.hold(scales / "s.lock")
    return ["run", "--model.path", str(repo_model(ctx.tmp)), "--out", str(scales / "s.json"), "--resume"]


def _se_run(*extra: str, make: Callable[[Context], list[str]] | None = None) -> Callable[[Context], list[str]]:
    """`search run` of configs/search/tiny.yaml to ctx.tmp/scales/s.json, plus `extra` and what `make` returns."""
    return lambda ctx: [
        "run", "--config", TINY_SEARCH, "--out", str(ctx.tmp / "scales" / "s.json"), *tmp_args(ctx, extra),
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


def _deep_state(ctx: Context) -> list[str]:
    """scales/s.state.json nested 100,000 levels deep (RecursionError in the JSON reader)."""
    (ctx.tmp / "scales").mkdir()
    (ctx.tmp / "scales" / "s.state.json").write_text("[" * 100_000 + "]" * 100_000)
    return ["--resume"]


def _deep_scale_file(ctx: Context) -> list[str]:
    return ["show", str(file_at("scales/deep.json", "[" * 100_000 + "]" * 100_000)(ctx))]


def _binary_scale_file(ctx: Context) -> list[str]:
    return ["show", str(file_at("scales/binary.json", bytes(range(256)) * 4)(ctx))]


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
    return lambda ctx: ["show", str(scale_file_at(data)(ctx))]


def _out_in(where: str) -> Callable[[Context], list[str]]:
    """`search run --out` at `where` under ctx.tmp, beside a user's own folder and a file of notes; with weights
    that would be refused on loading, so the --out refusal shows that it comes before the model is loaded."""

    def make(ctx: Context) -> list[str]:
        (ctx.tmp / "notes").write_text("my notes\n")
        (ctx.tmp / "results").mkdir()
        (ctx.tmp / "results" / "table.csv").write_text("a,b\n1,2\n")
        return ["run", "--model.path", str(llama_as_olmo2(ctx.tmp)), "--out", str(ctx.tmp / where)]

    return make


def _earlier_state(ctx: Context) -> list[str]:
    """`--resume` of an earlier search's state, scales/s.state.json."""
    file_at("scales/s.state.json", "{}")(ctx)
    return ["--resume"]


# == setups: insert above this line ==


ROWS = [
    # -- weights that do not fit the model (issue 13, item 2): evaluation and search loading
    BadInput("search-llama-weights", "search", _search(llama_as_olmo2), EXIT_USAGE, "do not fit Olmo2ForCausalLM"),
    # -- one writer per output (item 3)
    BadInput("search-out-locked", "search", _locked_search, EXIT_USAGE, "is in use by pid"),
    # -- --out checked before the work (issue 24: it failed after the whole search with a raw OSError)
    BadInput("search-out-is-a-folder", "search", _out_in("results"), EXIT_USAGE, "--out must name a .json scale file"),
    BadInput(
        "search-out-under-a-file",
        "search",
        _out_in("notes/s.json"),
        EXIT_USAGE,
        "notes is a file, not a directory; nothing was written; pass an --out inside a directory",
    ),
    BadInput(
        "search-out-below-a-file",
        "search",
        _out_in("notes/run1/s.json"),
        EXIT_USAGE,
        "notes is a file, not a directory, so",
    ),
    # -- search
    BadInput(
        "search-huge-seed",
        "search",
        _se_run("--ga.seed", "100000000000000000000000"),
        EXIT_USAGE,
        "ga.seed must be an integer seed",
    ),
    BadInput(  # once taken: 80 GB of resampled means on the first racing decision
        "search-racing-resamples-1e10",
        "search",
        _se_run("--ga.racing.resamples", "10000000000"),
        EXIT_USAGE,
        "ga.racing.resamples must lie in [1, 1,000,000], got 10000000000",
    ),
    BadInput(  # the racing section may be null: its own complaint, not jsonargparse's union of both
        "search-racing-confidence-2",
        "search",
        _se_run("--ga.racing.confidence", "2"),
        EXIT_USAGE,
        "error: ga.racing.confidence must lie in (0, 1), got 2.0; 0.95 is usual",
    ),
    BadInput(
        "search-racing-min-questions-0",
        "search",
        _se_run("--ga.racing.min_questions", "0"),
        EXIT_USAGE,
        "error: ga.racing.min_questions must be >= 1, got 0; 8 is the default",
    ),
    BadInput(
        "search-racing-negative-seed",
        "search",
        _se_run("--ga.racing.seed", "-1"),
        EXIT_USAGE,
        "ga.racing.seed must be an integer seed in [0, 2**32), got -1",
    ),
    BadInput("search-deep-state", "search", _se_run(make=_deep_state), EXIT_USAGE, "levels deep: not a state"),
    BadInput("search-show-deep-scale-file", "search", _deep_scale_file, EXIT_USAGE, "levels deep: not a scale file"),
    BadInput("search-show-binary-scale-file", "search", _binary_scale_file, EXIT_USAGE, "(binary, not JSON text)"),
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
        lambda ctx: _se_run("--model.path", str(gpt2_model(ctx.tmp)))(ctx),
        EXIT_USAGE,
        "GPT2LMHeadModel does not look like a HF decoder",
    ),
    BadInput(
        "search-truncated-safetensors",
        "search",
        _search(damaged_weights(lambda data: data[:4096])),
        EXIT_USAGE,
        "model.safetensors is not a readable safetensors file",
    ),
    BadInput(
        "search-config-alias-bomb",
        "search",
        _se_run(make=_se_config(ALIAS_BOMB)),
        EXIT_USAGE,
        "expands to more than 100,000 values",
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
        "search-data-dir-missing",
        "search",
        _se_run("--task.name", "mdqa", "--task.data_dir", "{tmp}/no_such_dir"),
        EXIT_USAGE,
        "--task.data_dir '{tmp}/no_such_dir' is not a directory; download qa_data/nq-open-oracle.jsonl.gz "
        "(mdqa) and kv_retrieval_data/kv-retrieval-75_keys.jsonl.gz (kv) of the Lost in the Middle release",
    ),
    BadInput(
        "search-data-dir-without-mdqa-file",
        "search",
        _se_run("--task.name", "mdqa", "--task.num_items", "3", "--task.data_dir", "{tmp}"),
        EXIT_USAGE,
        "no nq-open-oracle*.jsonl(.gz) in --data_dir '{tmp}'; download qa_data/nq-open-oracle.jsonl.gz of the Lost in "
        "the Middle release",
    ),
    BadInput(
        "search-held-out-beyond-the-data",
        "search",
        _se_run(make=lambda ctx: ["--task.data_dir", str(_kv_release_file(ctx, examples=6).parent)]),
        EXIT_USAGE,
        "the held-out check after the search needs 8 source examples",
    ),
    BadInput(
        "search-unknown-task",
        "search",
        _se_run("--task.name", "ruler"),
        EXIT_USAGE,
        "task.name 'ruler' is not a registered task; choose from ['babi_qa2', ",
    ),
    BadInput(
        "search-show-format-version",
        "search",
        _search_show(scale_json(format_version=2)),
        EXIT_USAGE,
        "format_version 2 is not supported",
    ),
    BadInput(
        "search-show-curve-mismatch",
        "search",
        _search_show(scale_json(scales=[1.0, 1.5, 1.5, 1.0])),
        EXIT_USAGE,
        "scales differ from the bezier curve",
    ),
    # -- garbage model directories (issue 24)
    BadInput(  # a misspelt local path looks like org/name, but is no hub id: no download hint
        "search-model-misspelt-local-path",
        "search",
        lambda ctx: ["run", "--model.path", "models/no-such-model", "--out", str(ctx.tmp / "scales" / "s.json")],
        EXIT_USAGE,
        "--model.path 'models/no-such-model': no such directory; pass a local HF model directory",
    ),
    BadInput(
        "search-short-flag-of-old-versions",
        "search",
        lambda ctx: ["run", "--model", "models/m", "--out", str(ctx.tmp / "scales" / "s.json")],
        EXIT_USAGE,
        "--model is spelt --model.path (an option is spelt as its config key)",
    ),
    BadInput(
        "search-model-hub-id",
        "search",
        lambda ctx: ["run", "--model.path", HUB_ID, "--out", str(ctx.tmp / "scales" / "s.json")],
        EXIT_USAGE,
        "is not a local directory; this project loads local model directories only",
    ),
    BadInput(
        "search-config-json-a-list",
        "search",
        _search(edited_model("config_list", garbage("config.json", b"[]"))),
        EXIT_USAGE,
        "config.json is not a model's config.json (a JSON object of the model's settings): it holds a JSON list",
    ),
    BadInput(
        "search-tokenizer-own-code",
        "search",
        _search(edited_model("tokenizer_code", tokenizer_with_own_code)),
        EXIT_USAGE,
        "never runs a model's code (no trust_remote_code)",
    ),
    BadInput(
        "search-special-tokens-map-binary",
        "search",
        _search(edited_model("special_tokens_binary", garbage("special_tokens_map.json"))),
        EXIT_USAGE,
        "special_tokens_map.json is not a tokenizer's special_tokens_map.json (a JSON object): it is binary",
    ),
    BadInput(
        "search-config-binary",
        "search",
        lambda ctx: [
            "run",
            "--config",
            str(file_at("s.yaml", b"PK\x03\x04\xff")(ctx)),
            "--out",
            str(ctx.tmp / "s.json"),
        ],
        EXIT_USAGE,
        "s.yaml is not a YAML config file: it is binary, not UTF-8 text (byte 0xff at offset 4)",
    ),
    # -- files that exist but this user may not read: one line naming the file, never "No such file" (issue 24)
    BadInput(
        "search-show-unreadable",
        "search",
        denying(_search_show(scale_json()), "scales/s.json"),
        EXIT_USAGE,
        "cannot read {tmp}/scales/s.json: permission denied",
    ),
    BadInput(
        "search-config-unreadable",
        "search",
        denying(
            lambda ctx: [
                "run",
                "--config",
                str(file_at("search.yaml", "seed: 1\n")(ctx)),
                "--out",
                str(ctx.tmp / "s.json"),
            ],
            "search.yaml",
        ),
        EXIT_USAGE,
        "cannot read {tmp}/search.yaml: permission denied",
    ),
    BadInput(
        "search-state-unreadable",
        "search",
        denying(
            _se_run(make=_earlier_state),
            "scales/s.state.json",
        ),
        EXIT_USAGE,
        "cannot read {tmp}/scales/s.state.json: permission denied",
    ),
    BadInput(
        "search-model-config-unreadable",
        "search",
        denying(_search(repo_model), "repo/config.json"),
        EXIT_USAGE,
        "cannot read {tmp}/repo/config.json: permission denied",
    ),
    BadInput(
        "search-show-folder-not-enterable",
        "search",
        denying(_search_show(scale_json()), "scales"),
        EXIT_USAGE,
        "cannot read {tmp}/scales/s.json: permission denied (this user may not enter the folder {tmp}/scales)",
    ),
    # == rows: insert above this line ==
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row: BadInput, tmp_path, capsys, monkeypatch, one_thread):
    check_row(row, tmp_path, capsys, monkeypatch)


# ----------------------------------------------------------------------------- not command lines


def test_search_on_a_full_disk_names_the_state_file(tmp_path, monkeypatch, capsys, one_thread):
    import repo_common.atomic
    from search.cli import main

    full_disk_on(monkeypatch, repo_common.atomic, "s.state.json")
    config = tmp_path / "c.yaml"
    config.write_text(
        "task: {name: kv, num_items: 3, num_examples: 1, max_new_tokens: 1}\nspace: {num_points: 2}\n"
        "ga: {population: 3, parents: 1, generations: 0, mutation_offspring: 1, crossover_offspring: 1}\n"
        "held_out: {num_examples: 0}\n"
    )
    out = tmp_path / "scales" / "s.json"
    code = main(["run", "--config", str(config), "--out", str(out), "--no_progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"No space left on device while writing {out.with_suffix('')}.state.json; free space" in err


def test_the_fitness_context_includes_the_metric(one_thread):
    """Same search set, same tokens, another metric: another context, so a resumed search reuses nothing."""
    from evaluation.model_loading import tiny_default
    from search.harness_fitness import HarnessFitness

    model, tokenizer = tiny_default()
    release = HarnessFitness(model, tokenizer, "kv", {"num_keys": 3}, num_examples=1)
    older = HarnessFitness(model, tokenizer, "kv", {"num_keys": 3, "metric": "best_subspan_em"}, num_examples=1)
    assert (release.metric, older.metric) == ("kv_containment", "best_subspan_em")
    assert release.data_sha256 == older.data_sha256 and release.context != older.context
    assert release.describe()["metric"] == "kv_containment"


def test_held_out_default_is_the_papers_500():
    from search.config import HeldOutConfig
    from search.harness_fitness import evaluate_held_out

    default = inspect.signature(evaluate_held_out).parameters["num_examples"].default
    assert default == HeldOutConfig().num_examples == 500
