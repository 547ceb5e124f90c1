"""Prompt / completion data: one example a sequence, loss on the completion only."""

import json

import pytest
import torch
from float_checks import assert_close_to_scale

from repo_train.data import PromptCompletionData
from repo_train.data.prompt_completion import IGNORE_INDEX


@pytest.fixture
def byte_tokenizer_dir(tmp_path):
    from evaluation.model_loading import byte_tokenizer

    byte_tokenizer().save_pretrained(tmp_path / "tok")
    return tmp_path / "tok"


def test_labels_cover_the_completion_and_eos_only(tmp_path, byte_tokenizer_dir):
    data = tmp_path / "pc.jsonl"
    data.write_text(json.dumps({"prompt": "Key: ab", "completion": " 7"}) + "\n")
    dataset = PromptCompletionData(paths=[str(data)], tokenizer=str(byte_tokenizer_dir), seq_len=16).build()
    item = dataset[0]
    prompt = [b + 2 for b in b"Key: ab"]  # byte tokenizer: id = byte + 2, <pad>=0, <eos>=1
    completion = [b + 2 for b in b" 7"]
    assert item["input_ids"].tolist() == prompt + completion + [1] + [0] * 6
    assert item["labels"].tolist() == [IGNORE_INDEX] * 7 + completion + [1] + [IGNORE_INDEX] * 6


def test_too_long_example_is_an_error(tmp_path, byte_tokenizer_dir):
    data = tmp_path / "pc.jsonl"
    data.write_text(json.dumps({"prompt": "x" * 30, "completion": "y"}) + "\n")
    with pytest.raises(ValueError, match="more than seq_len=16"):
        PromptCompletionData(paths=[str(data)], tokenizer=str(byte_tokenizer_dir), seq_len=16).build()


def test_training_uses_the_datas_labels(tmp_path, byte_tokenizer_dir):
    """The module's loss is the mean over completion tokens: equal to a hand computation."""
    from repo_train.training.module import RePoLightningModule

    data = tmp_path / "pc.jsonl"
    data.write_text(json.dumps({"prompt": "Key: ab", "completion": " 7"}) + "\n")
    dataset = PromptCompletionData(paths=[str(data)], tokenizer=str(byte_tokenizer_dir), seq_len=16).build()
    module = RePoLightningModule(
        position="rope", attn_implementation="sdpa",
        config_overrides={"vocab_size": 258, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": None},
    )  # fmt: skip
    module.configure_model()
    batch = {k: v[None] for k, v in dataset[0].items()}
    parts = module._losses(batch)
    logits = module(batch["input_ids"])[0].float()
    targets = batch["input_ids"][0, 7:10]  # " 7" and EOS (tokens 7..9), predicted from positions 6..8
    expected = torch.nn.functional.cross_entropy(logits[6:9], targets)
    assert parts.tokens == 3
    assert_close_to_scale(parts.ce, expected, 1e-5, what="cross-entropy")
