"""Loading models: every RoPE family from a saved directory, the tiny default, the byte tokenizer, clear errors."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from evaluation.generation import DecodeSettings, generate
from evaluation.model_identity import model_identity
from evaluation.model_loading import byte_tokenizer, load_model, tiny_default
from repo_train.modeling import RePoOlmo2ForCausalLM, RepoPolicy, layer_policies
from repo_train.modeling.presets import tiny

SHAPE = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    pad_token_id=0,
    eos_token_id=1,
)
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "olmo2": (Olmo2Config, Olmo2ForCausalLM),
}


def save(model, tokenizer, path):
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", [*FAMILIES, "repo_olmo2"])
def test_each_family_loads_from_a_directory_and_generates(tmp_path, family):
    tokenizer = byte_tokenizer()
    if family == "repo_olmo2":
        model = RePoOlmo2ForCausalLM(tiny(vocab_size=len(tokenizer), position_method="r2n1"))
    else:
        config_cls, model_cls = FAMILIES[family]
        model = model_cls(config_cls(vocab_size=len(tokenizer), **SHAPE))
    path = save(model, tokenizer, tmp_path / family)
    loaded, loaded_tok = load_model(path)
    assert type(loaded).__name__ == type(model).__name__ and not loaded.training
    assert loaded_tok.padding_side == "left" and loaded_tok.pad_token_id == 0
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7, 8]])
        assert torch.equal(loaded(ids).logits, model.eval()(ids).logits)  # exact: same weights, same kernels
    out = generate(loaded, loaded_tok, ["hello there", "hi"], DecodeSettings(max_new_tokens=3, batch_size=2))
    assert all(len(o.token_ids) == 3 or o.stop_reason == "eos" for o in out)
    assert model_identity(loaded)["name"] == str(path)


def test_published_repo_layout_loads_with_repo_layers(tmp_path):
    tokenizer = byte_tokenizer()
    repo = RePoOlmo2ForCausalLM(tiny(vocab_size=len(tokenizer), position_method="repo", repo_start_layer=1, **SHAPE))
    path = save(repo, tokenizer, tmp_path / "published")  # REPO weights under self_attn: the published layout
    config = json.loads((path / "config.json").read_text())
    for key in ("position_method", "repo_start_layer", "repo_hidden_size"):
        del config[key]
    config["model_type"] = "olmo2"
    config["pe_config"] = {"dynamic_pe_mode": "swigluex_multihead", "dynamic_pe_start_layer": 1}
    (path / "config.json").write_text(json.dumps(config))
    model, _ = load_model(path)
    assert isinstance(model, RePoOlmo2ForCausalLM) and isinstance(layer_policies(model)[1], RepoPolicy)
    for key, value in repo.state_dict().items():  # the predictors are the saved ones, not fresh weights
        assert torch.equal(model.state_dict()[key], value), key


def test_missing_pad_token_falls_back_to_eos(tmp_path):
    tokenizer = byte_tokenizer()
    tokenizer.pad_token = None
    path = save(LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), **SHAPE)), tokenizer, tmp_path / "nopad")
    _, loaded = load_model(path)
    assert loaded.pad_token == "<eos>"


def test_clear_errors_for_missing_directory_config_tokenizer_and_dtype(tmp_path):
    with pytest.raises(FileNotFoundError, match="model directory .* no such directory"):
        load_model(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
    path = save(LlamaForCausalLM(LlamaConfig(vocab_size=258, **SHAPE)), None, tmp_path / "notok")
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer .* tokenizer.save_pretrained"):
        load_model(path)
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        load_model(path, dtype="float8")


def test_tiny_default_is_reproducible_and_sized_to_its_tokenizer():
    model_a, tokenizer = tiny_default(seed=0)
    model_b, _ = tiny_default(seed=0)
    model_c, _ = tiny_default(seed=1)
    assert model_a.config.vocab_size == len(tokenizer) == 258
    assert all(torch.equal(a, b) for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values()))
    assert not torch.equal(model_a.lm_head.weight, model_c.lm_head.weight)
    assert model_identity(model_a)["name"] == "tiny-default(seed=0)"


def test_byte_tokenizer_round_trips_any_text_with_offsets():
    tokenizer = byte_tokenizer()
    text = "Ünïcode ✓ and\nnewlines\t!"
    enc = tokenizer(text, return_offsets_mapping=True)
    assert enc["input_ids"] == [b + 2 for b in text.encode()]
    assert tokenizer.decode(enc["input_ids"]) == text
    assert [text[s:e] for s, e in enc["offset_mapping"]][:2] == ["Ü", "Ü"]  # both bytes of Ü map to it
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)


def test_place_model_devices_and_errors():
    from evaluation.model_loading import place_model, tiny_default

    model, _ = tiny_default(seed=0)
    assert place_model(model, "cpu").device.type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert place_model(model, "auto").device.type == expected
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        place_model(model, "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU; use --device cpu"):
            place_model(model, "cuda")


def test_dtype_auto_is_bfloat16_on_a_gpu_and_float32_on_the_cpu(monkeypatch):
    from evaluation.model_loading import resolve_dtype

    assert resolve_dtype("auto", "cuda") == "bfloat16" and resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_dtype("auto", "auto") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_dtype("auto", "auto") == "float32"
    assert resolve_dtype("float16", "cuda") == "float16" and resolve_dtype("float32", "cuda") == "float32"
