"""docs/methods/README.md's table of methods × model kinds, checked cell by cell against the code.

Each "runs" cell attaches the method to a tiny model of that kind and generates from a two-document prompt
(so CALIOPE and Found in the Middle see spans); each "refused" cell must end in a one-line ValueError before
any prompt. The gold-log-likelihood column asks the runner's own check (`refuse_unforceable`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from evaluation.generation import DecodeSettings, generate
from evaluation.methods import MethodStack
from evaluation.runner import refuse_unforceable
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from search.fitness import FitnessResult, SubsetWeights
from search.ga import GAConfig
from search.genome import CurveGenome, SearchSpace
from search.scale_file_writer import ScaleFile, config_sha256, search_section, write_scale_file

TABLE = Path(__file__).parents[2] / "docs" / "methods" / "README.md"
PROMPT = "Doc A: the key is blue.\nDoc B: the key is red.\nQuestion: which key?"
SPANS = [[[0, 23], [24, 46]]]
#: The spec each table row is checked with (the methods' defaults where they have them).
SPECS = {
    "baseline": "baseline",
    "caliope": "caliope:calibrator=hourglass",
    "fim": "fim",
    "pcd": "pcd",
    "pi": "pi:scale=2",
    "lpes": "lpes:scale_file={scale_file}",
    "ms_poe": "ms_poe",
    "attention_buckets": "attention_buckets",
    "positional_hidden": "positional_hidden:dims=3;17,layers=1-2,factor=0",
    "string": "string:shifted_offset=16,small_local_value=4",  # the prompt is ~70 tokens: the shift acts
}

pytestmark = pytest.mark.usefixtures("one_thread")


def _table() -> tuple[list[str], dict[str, list[str]]]:
    """(column headings after 'method', {method: cells}) of the page's first table."""
    rows = [line for line in TABLE.read_text().splitlines() if line.startswith("| ")]
    split = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    header, body = split[0], split[1:]
    return header[1:], {re.sub(r"`", "", row[0]): row[1:] for row in body}


def _olmo(position_method: str, tokenizer):
    torch.manual_seed(0)
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, position_method=position_method)
    return RePoOlmo2ForCausalLM(config).eval()


def _llama(tokenizer, rope_parameters: dict):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0, eos_token_id=1,
        rope_parameters=rope_parameters,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _models(column: str, tokenizer) -> list:
    """The tiny models standing for one column of the table."""
    default = {"rope_type": "default", "rope_theta": 10000.0}
    yarn = {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0, "original_max_position_embeddings": 1024}
    if column.startswith("RoPE (OLMo-2"):
        return [_olmo("rope", tokenizer), _llama(tokenizer, default)]
    if column.startswith("RoPE with a scaled"):
        return [_llama(tokenizer, yarn)]
    if column.startswith("RoPE/NoPE hybrid"):
        return [_olmo("r2n1", tokenizer), _olmo("n2r1", tokenizer)]
    if column.startswith("NoPE in every layer"):
        return [_olmo("nope", tokenizer)]
    if column.startswith("REPO"):
        return [_olmo("repo", tokenizer)]
    raise AssertionError(f"no models for the column {column!r}: add them here")


def _scale_file(path: Path, model) -> str:
    """An LPES scale file made for `model` (4 layers, scales 1.2 … 1.9 … 1.4)."""
    section = search_section(GAConfig(), SubsetWeights(), "ab" * 32, generations=1, wall_time_s=0.0)
    record = {"name": "tiny", "config_sha256": config_sha256(model.config)}
    fitness = FitnessResult(0.5, {"begin": 0.5, "middle": 0.5, "end": 0.5})
    genome = CurveGenome((0, 2, 3), (12, 19, 14))
    write_scale_file(path, ScaleFile.from_genome(SearchSpace(4, num_points=3), genome, fitness, record, section))
    return str(path)


def _outcome(spec: str, model, tokenizer) -> str:
    """'runs' or 'refused', by attaching the stack and generating two tokens."""
    try:
        stack = MethodStack.parse(spec)
        with stack.attached(model, tokenizer):
            outputs = generate(model, tokenizer, [PROMPT], DecodeSettings(max_new_tokens=2), stack, SPANS)
    except ValueError as err:
        assert "\n" not in str(err), f"{spec}: a refusal must be one line, got {err}"
        return "refused"
    assert len(outputs) == 1
    return "runs"


def test_the_table_names_every_method_once():
    _, rows = _table()
    assert sorted(rows) == sorted(SPECS)


@pytest.mark.parametrize("method", sorted(SPECS))
def test_each_model_kind_cell_is_what_the_code_does(method, tiny_lm, tmp_path):
    _, tokenizer = tiny_lm
    columns, rows = _table()
    for column, expected in zip(columns, rows[method]):
        if column.startswith("`--score gold_loglik`"):
            continue
        for model in _models(column, tokenizer):
            spec = SPECS[method].format(scale_file=_scale_file(tmp_path / "scales.json", model))
            got = _outcome(spec, model, tokenizer)
            assert got == expected, (
                f"{method} on {column} ({type(model).__name__}): the code {got}, the table says {expected}"
            )


@pytest.mark.parametrize("method", sorted(SPECS))
def test_gold_loglik_cell_is_what_the_runner_checks(method, tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    columns, rows = _table()
    expected = rows[method][columns.index("`--score gold_loglik`")]
    stack = MethodStack.parse(SPECS[method].format(scale_file=_scale_file(tmp_path / "scales.json", model)))
    with stack.attached(model, tokenizer):
        try:
            refuse_unforceable(stack, model)
            got = "runs"
        except ValueError:
            got = "refused"
    assert got == expected
