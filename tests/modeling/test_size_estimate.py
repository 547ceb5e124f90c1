"""The size estimate read from config.json (a shape that cannot fit is refused before any allocation)."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from repo_train.modeling.size_estimate import check_fits_in_memory, estimated_parameters


@pytest.mark.parametrize("family", ["olmo2", "llama-gqa-tied"])
def test_the_estimate_is_a_close_lower_bound_of_the_real_count(family):
    if family == "olmo2":
        config = tiny(position_method="rope")
        model = RePoOlmo2ForCausalLM(config)
    else:
        config = LlamaConfig(vocab_size=300, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                             num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
        model = LlamaForCausalLM(config)
    actual = sum(p.numel() for p in model.parameters())
    estimate = estimated_parameters(config.to_dict())
    assert 0.97 * actual <= estimate <= actual  # what it leaves out is the norms


def test_a_shape_beyond_memory_is_one_line_and_an_unknown_shape_passes(monkeypatch):
    monkeypatch.setattr("repo_train.modeling.size_estimate.available_memory", lambda: 2**30)
    fits = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}
    check_fits_in_memory(fits, 4, "small/config.json")
    with pytest.raises(
        ValueError,
        match=r"^big/config.json describes a model of about 4\.3 B parameters \(16\.1 GiB .* than the 1\.0 GiB",
    ):
        check_fits_in_memory(
            {**fits, "hidden_size": 8192, "num_hidden_layers": 4, "vocab_size": 1000}, 4, "big/config.json"
        )
    check_fits_in_memory({"n_embd": 10**9}, 4, "other/config.json")  # not a decoder this can size: left to loading
