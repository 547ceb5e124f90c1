"""Loss, optimizer groups, schedule and batch arithmetic against hand computations."""

import math

import pytest
import torch

from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny
from repo_train.training.objective import IGNORE_INDEX, lm_loss, shift_labels
from repo_train.training.optim import build_adamw, linear_decay, parameter_groups
from repo_train.training.settings_checks import batch_accumulation


def test_loss_is_cross_entropy_plus_scaled_log_z_squared():
    logits = torch.tensor([[[1.0, 2.0, 0.5], [0.0, 0.0, 3.0], [9.0, 9.0, 9.0]]])
    labels = torch.tensor([[1, 2, IGNORE_INDEX]])
    parts = lm_loss(logits, labels, z_loss_multiplier=1e-5)
    log_z = [math.log(math.exp(1) + math.exp(2) + math.exp(0.5)), math.log(2 + math.exp(3))]
    ce = ((log_z[0] - 2.0) + (log_z[1] - 3.0)) / 2
    z = 1e-5 * (log_z[0] ** 2 + log_z[1] ** 2) / 2
    assert math.isclose(parts.ce.item(), ce, rel_tol=1e-6)
    assert math.isclose(parts.z.item(), z, rel_tol=1e-5)
    assert math.isclose(parts.total.item(), ce + z, rel_tol=1e-6)
    assert parts.tokens == 2


def test_shift_labels_ignores_last_position_and_padding():
    ids = torch.tensor([[5, 6, 0, 7]])
    assert shift_labels(ids, pad_token_id=0).tolist() == [[6, IGNORE_INDEX, 7, IGNORE_INDEX]]


def test_all_ignored_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="no target tokens"):
        lm_loss(torch.zeros(1, 2, 3), torch.full((1, 2), IGNORE_INDEX))


def test_weight_decay_skips_only_embeddings():
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo"))
    decay, no_decay = parameter_groups(model, 0.1)
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.1
    assert [id(p) for p in no_decay["params"]] == [id(model.model.embed_tokens.weight)]
    assert sum(p.numel() for p in decay["params"]) + model.model.embed_tokens.weight.numel() == sum(
        p.numel() for p in model.parameters()
    )
    opt = build_adamw(model, lr=7.4487e-5)
    assert opt.defaults["betas"] == (0.9, 0.95) and opt.defaults["eps"] == 1e-8


def test_linear_decay_to_zero_without_warmup():
    factor = linear_decay(100)
    assert [factor(s) for s in (0, 25, 50, 99, 100, 150)] == [1.0, 0.75, 0.5, 0.01, 0.0, 0.0]
    warm = linear_decay(100, warmup_steps=10)
    assert warm(0) == 0.1 and warm(9) == 1.0 and warm(10) == 1.0 and warm(55) == 0.5


def test_gradient_accumulation_is_computed_from_the_global_batch():
    # REPO paper: 512 sequences per step, micro-batch 4, 4 GPUs -> 32 micro-batches per step.
    assert batch_accumulation(512, 4, 4) == 32
    assert batch_accumulation(512, 4, 16) == 8
    with pytest.raises(ValueError, match="not divisible by micro_batch_size × processes = 3 × 4 = 12"):
        batch_accumulation(512, 3, 4)
