"""The Found-in-the-Middle attention-bias measurement, checked against HF's eager attention weights."""

import dataclasses

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from evaluation.attention_bias import attention_by_position, bias_curve
from evaluation.generation import DecodeSettings, TokenizedPrompt
from evaluation.model_loading import byte_tokenizer
from evaluation.runner import prepare_task

MDQA = {"num_documents": 3, "num_examples": 2, "gold_positions": "all"}


@pytest.fixture(scope="module")
def llama_and_task():
    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prepared = prepare_task("mdqa", MDQA, model, tokenizer, DecodeSettings(max_new_tokens=1, batch_size=2))
    return model, tokenizer, prepared


@pytest.mark.slow  # eager attention weights of every layer (~7 s)
def test_per_document_attention_equals_the_eager_weights(llama_and_task):
    model, tokenizer, prepared = llama_and_task
    records, layers = attention_by_position(model, tokenizer, prepared, layers="last_half")
    assert layers == [2, 3] and len(records) == len(prepared.rows) == 6
    for record, prompt in zip(records, prepared.prompts):  # records come in row order
        ids = torch.tensor([prompt.input_ids])
        eager = model.config._attn_implementation
        model.config._attn_implementation = "eager"
        try:
            with torch.no_grad():
                weights = model(ids, output_attentions=True).attentions
        finally:
            model.config._attn_implementation = eager
        last = torch.stack([weights[layer][0, :, -1] for layer in layers]).mean(dim=(0, 1))  # heads, layers
        for doc, (start, end) in enumerate(prompt.item_spans):
            mass = last[start:end].sum().item()
            assert record["mass"][doc] == pytest.approx(mass, rel=1e-4, abs=1e-7)
            assert record["mean"][doc] == pytest.approx(mass / (end - start), rel=1e-4, abs=1e-9)


def test_bias_curve_pools_by_question(llama_and_task):
    model, tokenizer, prepared = llama_and_task
    records, _ = attention_by_position(model, tokenizer, prepared)
    curve = bias_curve(records, "mass", resamples=200)
    assert [e["position"] for e in curve["gold"]] == [0, 1, 2]
    for entry in curve["gold"]:
        values = [r["mass"][entry["position"]] for r in records if r["gold_position"] == entry["position"]]
        assert entry["value"] == pytest.approx(sum(values) / len(values))
        assert entry["ci"][0] <= entry["value"] <= entry["ci"][1] and entry["questions"] == 2
    assert len(curve["all_documents"]) == 3
    with pytest.raises(ValueError, match="'mean' or 'mass'"):
        bias_curve(records, "sum")


def test_a_task_without_items_is_refused(llama_and_task):
    model, tokenizer, prepared = llama_and_task
    bare = dataclasses.replace(prepared, prompts=[TokenizedPrompt(p.input_ids) for p in prepared.prompts])
    with pytest.raises(ValueError, match="no item spans"):
        attention_by_position(model, tokenizer, bare)
