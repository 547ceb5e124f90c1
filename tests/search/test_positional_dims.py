"""`python -m search positional-dims`: PositionalHidden's dimension search (search/positional_dims.py).

A tiny Llama gets a planted positional channel: the first token of every text is a marker whose embedding is
large in one channel F, head 0 of layer 0 attends uniformly (zero queries) and copies F into channel C, and no
other weight reads into C. C's value at position t is then k / (t + 1) in every layer: monotone and smooth,
which the statistic must find.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from search import cli, positional_dims
from search.channel_scaling import scaled_channels
from search.positional_dims_options import PositionalDims, parse_layers
from search.positional_statistic import candidate_channels

ASSETS = Path(__file__).resolve().parents[2] / "workflows" / "assets" / "tiny-kv-base"
FIXTURES = Path(__file__).parent / "fixtures" / "positional_hidden"
PLANTED, FLAG = 37, 5
MARKER = "\x01"  # one byte: one token of the byte-level tokenizer, at the start of every text only
MAX_LENGTH, SAMPLES = 48, 6


def _tiny_model(directory: Path) -> Path:
    """A random 8-layer Llama (grouped-query attention) with the planted channel, saved with a byte tokenizer."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=258,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = LlamaForCausalLM(config).eval()
    head = config.hidden_size // config.num_attention_heads
    marker = 2 + ord(MARKER)  # the byte tokenizer's id of the marker byte (two special tokens first)
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed[:, PLANTED] = 0
        embed[:, FLAG] = 0
        embed[marker, FLAG] = 4.0
        for index, layer in enumerate(model.model.layers):
            layer.self_attn.o_proj.weight[PLANTED] = 0
            layer.mlp.down_proj.weight[PLANTED] = 0
            if index == 0:
                layer.self_attn.q_proj.weight[:head] = 0  # head 0: uniform causal attention
                layer.self_attn.v_proj.weight[0] = 0
                layer.self_attn.v_proj.weight[0, FLAG] = 1.0
                layer.self_attn.o_proj.weight[PLANTED, 0] = 1.0
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSETS / name, directory / name)
    assert len(model.config.to_dict()) and marker < config.vocab_size
    return directory


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("positional-dims")
    model = _tiny_model(root / "model")
    chunk = MAX_LENGTH * 10  # each text is cut from this many characters
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz ,."))
    corpus = "".join(MARKER + "".join(rng.choice(letters, chunk - 1)) for _ in range(SAMPLES))
    (root / "corpus.txt").write_text(corpus)
    lines = [
        {"input": f"key {i}: value {i * 7}. What is the value of key {i}?", "output": f"{i * 7}"} for i in range(3)
    ]
    (root / "valid.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return {"root": root, "model": model, "corpus": root / "corpus.txt", "valid": root / "valid.jsonl"}


def _args(tiny: dict, out: Path, *more: str) -> list[str]:
    return [
        "positional-dims",
        "--model",
        str(tiny["model"]),
        "--valid_set",
        str(tiny["valid"]),
        "--out",
        str(out),
        "--corpus",
        str(tiny["corpus"]),
        "--samples",
        str(SAMPLES),
        "--max_length",
        str(MAX_LENGTH),
        "--mono_skip",
        "16",
        "--smooth_skip",
        "16",
        "--topk_smooth",
        "3",
        "--layers",
        "2-5",
        "--no_progress",
        "true",
        *more,
    ]


def _search(tiny: dict, out: Path, *more: str) -> int:
    return cli.main(_args(tiny, out, *more))


def test_statistic_finds_the_planted_channel(tiny, tmp_path):
    assert _search(tiny, tmp_path / "run.json") == 0
    written = json.loads((tmp_path / "run.json").read_text())
    found = written["search"]["candidates"]
    assert found[0]["dim"] == PLANTED, found  # the smoothest monotone channel
    assert found[0]["direction"] == "decreasing"
    assert len(found[0]["monotone_layers"]) == 5  # every entry the authors look at (2 .. n-2 of 8)
    scored = {item["dim"] for item in found}
    assert all(isinstance(item["loss"], float) for item in found)
    ranks = [key for key, _ in written["search"]["ranking"]]
    assert len(ranks) == 3 and set(ranks) <= {"baseline", *(str(dim) for dim in scored)}
    assert written["dims"][0] in scored


def test_statistic_on_averaged_curves():
    """The statistic alone: a channel rising as log(t) in every entry, the others noise, is the one found."""
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(9, 80, 16)).astype(np.float32)
    hidden[:, :, 11] = np.log1p(np.arange(80))[None, :]
    found, entries = candidate_channels(hidden, topk=3, mono_skip=10, smooth_skip=10)
    assert entries == 8  # the odd first entry (the embeddings) dropped
    assert [item.dim for item in found][:1] == [11]
    assert found[0].direction == "increasing" and found[0].layers == [2, 3, 4, 5, 6]


def test_output_has_the_authors_config_format(tiny, tmp_path):
    out = tmp_path / "cfg.json"
    assert _search(tiny, out, "--factor", "-1") == 0
    written = json.loads(out.read_text())
    theirs = json.loads((FIXTURES / "config_llama2_7b.json").read_text())
    assert set(written) - {"search"} == set(theirs)
    for key, value in theirs.items():
        assert type(written[key]) is type(value) or (key == "factor" and isinstance(written[key], int | float)), key
    assert all(type(item) is int for item in written["dims"] + written["layers"])
    assert written["layers"] == [2, 3, 4, 5] and written["factor"] == -1.0 and written["change_value"] is False
    assert written["last_recompute_tokens"] == 1 and written["skip_first"] == 0


def test_interrupted_search_resumes_to_the_same_result(tiny, tmp_path, monkeypatch, capsys):
    whole = tmp_path / "whole.json"
    assert _search(tiny, whole) == 0
    calls = {"texts": 0, "examples": 0}
    real_ids, real_loss = positional_dims.sample_ids, positional_dims.answer_loss

    def ids_then_ctrl_c(*args, **kwargs):
        calls["texts"] += 1
        if calls["texts"] == 3:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C: the text at hand is finished, then the search stops
        return real_ids(*args, **kwargs)

    def loss_then_ctrl_c(*args, **kwargs):
        calls["examples"] += 1
        if calls["examples"] == 5:
            signal.raise_signal(signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(positional_dims, "sample_ids", ids_then_ctrl_c)
    monkeypatch.setattr(positional_dims, "answer_loss", loss_then_ctrl_c)
    out = tmp_path / "parts.json"
    assert _search(tiny, out) == 130
    assert "interrupted" in capsys.readouterr().err and not out.exists()
    with np.load(tmp_path / "parts.hidden.npz") as saved:
        assert int(saved["count"]) == 3
    assert _search(tiny, out) == 2  # the state is there: --resume or another --out
    assert "--resume" in capsys.readouterr().err
    assert _search(tiny, out, "--resume", "true") == 130  # stopped again, while scoring
    state = json.loads((tmp_path / "parts.state.json").read_text())
    assert sum(len(values) for values in state["losses"].values()) == 5  # the 5th example finished, then it stopped
    monkeypatch.undo()
    assert _search(tiny, out, "--resume", "true") == 0
    assert json.loads(out.read_text()) == json.loads(whole.read_text())


def test_factor_one_leaves_every_loss_as_the_baseline(tiny, tmp_path):
    out = tmp_path / "one.json"
    assert _search(tiny, out, "--factor", "1") == 0
    found = json.loads(out.read_text())["search"]
    scale = abs(found["baseline_loss"])
    assert all(abs(item["loss"] - found["baseline_loss"]) <= 1e-6 * scale for item in found["candidates"])


def test_a_candidate_is_scored_by_the_method_with_the_answer_rows_recomputed(tiny):
    """The search applies the method's own rule: with `n` recomputed rows, the rows before them are the
    untouched model's, the last `n` differ, and all equal `positional_hidden` with last_recompute_tokens=n;
    the untouched policies come back after the block."""
    from evaluation.methods import build_method  # the method's module needs the model core (torch)

    model = LlamaForCausalLM.from_pretrained(tiny["model"]).eval()
    ids = torch.arange(3, 15)[None]
    with torch.no_grad():
        plain = model(ids).logits
        with scaled_channels(model, [PLANTED, 9], [3, 5], 0.0) as recompute_rows:
            recompute_rows(4)
            scaled = model(ids).logits
        method = build_method(f"positional_hidden:dims={PLANTED};9,layers=3;5,factor=0,last_recompute_tokens=4")
        method.attach(model, None)
        try:
            by_method = model(ids).logits
        finally:
            method.detach(model)
        after = model(ids).logits
    scale = float(plain.abs().max())
    # the untouched rows are recomputed apart from the scaled pass: equal up to summation order
    torch.testing.assert_close(scaled[:, :-4], plain[:, :-4], rtol=0, atol=1e-6 * scale)
    assert float((scaled[:, -4:] - plain[:, -4:]).abs().max()) > 1e-4 * scale  # 100× the rounding above
    torch.testing.assert_close(scaled, by_method, rtol=0, atol=0)
    torch.testing.assert_close(after, plain, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--layers", "5-2"], "runs backwards"),
        (["--layers", "x"], "comma-separated"),
        (["--layers", "2-40"], "the model has 8 layers"),
        (["--mono_skip", "45"], "needs at least 12"),
        (["--dtype", "int8"], "choose one of"),
        (["--num_dims", "4"], "exceeds"),
        (["--samples", "50"], "fewer than --max_length"),
    ],
)
def test_bad_inputs_are_one_line(tiny, tmp_path, capsys, more, message):
    assert _search(tiny, tmp_path / "bad.json", *more) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_bad_files_are_one_line(tiny, tmp_path, capsys):
    bad_valid = tmp_path / "valid.jsonl"
    bad_valid.write_text('{"input": "x"}\n')
    args = _args(tiny, tmp_path / "a.json")
    cases = [
        (["--valid_set", str(bad_valid)], 'give {"input"'),
        (["--valid_set", str(tmp_path / "missing.jsonl")], "no such file"),
        (["--model", str(tmp_path)], "config.json"),
        (["--out", str(tmp_path / "a.txt")], "ending in .json"),
    ]
    foreign = tmp_path / "foreign.json"
    foreign.write_text("{}")
    cases.append((["--out", str(foreign)], "exists"))
    for more, message in cases:
        assert cli.main(args + more) == 2, more
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (more, err)
    assert foreign.read_text() == "{}"


def test_parse_layers():
    assert parse_layers("10-12,3") == [3, 10, 11, 12]
    assert PositionalDims.__doc__


def test_resume_with_other_options_or_a_foreign_state_is_refused(tiny, tmp_path, capsys):
    out = tmp_path / "done.json"
    assert _search(tiny, out) == 0
    written = out.read_text()
    capsys.readouterr()
    assert _search(tiny, out, "--resume", "true", "--factor", "0.5") == 2
    err = capsys.readouterr().err.strip()
    assert "other options (factor)" in err and len(err.splitlines()) == 1
    assert _search(tiny, out, "--resume", "true") == 0  # the same options: the finished search, written again
    assert out.read_text() == written
    foreign = tmp_path / "other.json"
    (tmp_path / "other.state.json").write_text('{"kind": "something else"}')
    assert _search(tiny, foreign, "--resume", "true") == 2
    assert "is not a positional-dims state" in capsys.readouterr().err
