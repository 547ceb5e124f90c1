"""Training options: continuing from an HF OLMo-2 directory, OLMo shards, activation checkpointing, curriculum."""

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from float_checks import assert_close_to_scale
from loss_history import LossHistory
from transformers import Olmo2Config, Olmo2ForCausalLM

from repo_train.data import OlmoNumpyData, SyntheticData
from repo_train.modeling import layer_policies
from repo_train.modeling.presets import tiny
from repo_train.modeling.repo_policy import RepoPosition
from repo_train.training.activation_checkpointing import checkpointed_modules
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule


def _fit(module, data, steps, callbacks=()):
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, use_distributed_sampler=False, gradient_clip_val=1.0, callbacks=list(callbacks),
    )  # fmt: skip
    trainer.fit(module, data)
    return trainer


def _synthetic(seq_len=32):
    return RePoDataModule(
        train=SyntheticData(seq_len=seq_len, num_samples=128), global_batch_size=4, micro_batch_size=4
    )


def test_continue_from_a_vanilla_olmo2_directory(tmp_path):
    fields = {k: v for k, v in tiny().to_dict().items() if k not in ("model_type", "transformers_version")}
    for key in ("position_method", "repo_start_layer", "repo_hidden_size", "architectures"):
        fields.pop(key, None)
    vanilla = Olmo2ForCausalLM(Olmo2Config(**fields))
    vanilla.save_pretrained(tmp_path / "olmo2")
    module = RePoLightningModule(init_from=str(tmp_path / "olmo2"), position="repo", attn_implementation="sdpa")
    module.configure_model()
    assert module.model.config.position_method == "repo"
    assert torch.equal(module.model.model.embed_tokens.weight, vanilla.model.embed_tokens.weight)
    assert hasattr(module.model.model.layers[-1].self_attn, "gate_map")
    trainer = _fit(module, _synthetic(), 2)
    assert trainer.global_step == 2


def test_training_on_olmo_numpy_shards(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        tokens = rng.integers(16, 256, size=32 * 20).astype(np.uint32)
        tokens[::50] = 2  # document separators
        tokens.tofile(tmp_path / f"part-{name}.npy")
    data = RePoDataModule(
        train=OlmoNumpyData(paths=[str(tmp_path / "*.npy")], seq_len=32, vocab_size=256, eos_token_id=2,
                            pad_token_id=0, dtype="uint32", cache_dir=str(tmp_path / "cache")),
        global_batch_size=4, micro_batch_size=2,
    )  # fmt: skip
    history = LossHistory()
    trainer = _fit(RePoLightningModule(lr=3e-3, attn_implementation="sdpa"), data, 4, [history])
    assert trainer.global_step == 4 and trainer.accumulate_grad_batches == 2 and len(history.losses) == 4


def test_activation_checkpointing_gives_the_same_losses():
    runs = []
    for checkpointing in (False, True):
        pl.seed_everything(0, verbose=False)
        history = LossHistory()
        module = RePoLightningModule(lr=3e-3, attn_implementation="sdpa", activation_checkpointing=checkpointing)
        _fit(module, _synthetic(), 3, [history])
        assert bool(checkpointed_modules(module.model)) == checkpointing
        runs.append(history.losses)
    assert_close_to_scale(runs[1], runs[0], 1e-6, what="losses")


def test_repo_curriculum_anneals_linear_positions():
    module = RePoLightningModule(
        lr=1e-3, attn_implementation="sdpa", position=RepoPosition(curriculum_start=1.0, curriculum_steps=4)
    )
    seen = []

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(next(p.linear_mix for p in layer_policies(pl_module.model) if p.name == "repo"))

    _fit(module, _synthetic(), 6, [Watch()])
    assert seen == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
