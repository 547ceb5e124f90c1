"""The engine switches `model.loss_chunk_tokens` (chunked cross-entropy) and `model.fused_adamw` (torch's fused
AdamW) train the tiny model as the eager path does, up to float rounding; the chunked loss keeps no full logits."""

import pytest
import pytorch_lightning as pl
import torch
from bad_input_helpers import refused_in_one_line
from float_checks import assert_close_to_scale
from loss_history import LossHistory
from pytorch_lightning.callbacks import ModelCheckpoint
from saved_tensors import SavedStorages

from repo_common.cli_errors import EXIT_USAGE
from repo_train.data import SyntheticData
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule
from repo_train.training.objective import IGNORE_INDEX

SEQ_LEN = 32
MICRO_BATCH = 2  # 2 x 32 positions, 62 of them with a target (the last of each row has none)
# AdamW's epsilon in these runs. With the paper's 1e-8, an element whose gradient is float noise (~1e-8, a
# difference of two nearly equal sums) moves by ~lr whatever that noise is (update = lr·g/(|g| + eps)), so two
# float paths that differ in the last bits end 4 steps apart by up to ~6e-4 of a tensor's scale (measured for
# fused vs unfused AdamW, whose gradients are bit-equal at step 1). With eps = 1e-3 the update is a smooth
# function of the gradient (slope <= lr/eps) and the weights can be compared tightly.
EPS = 1e-3
# Float32 drift between the paths, measured on a 2-core AMD EPYC with one thread (max |Δ| / scale):
# losses <= 9e-8, weights after 4 AdamW steps <= 1.8e-7; the factors leave 10x or more.
LOSS_REL = 1e-6
WEIGHT_REL = 3e-6


def _module(**switches):
    return RePoLightningModule(lr=3e-3, eps=EPS, attn_implementation="sdpa", **switches)


def _train(module, steps=4, callbacks=(), ckpt_path=None, **trainer_options):
    """`steps` optimizer steps of 2 micro batches each (gradient accumulation 2), fp32, clipping on."""
    pl.seed_everything(0, verbose=False)
    history = LossHistory()
    data = RePoDataModule(
        train=SyntheticData(seq_len=SEQ_LEN, num_samples=64, seed=1),
        global_batch_size=2 * MICRO_BATCH,
        micro_batch_size=MICRO_BATCH,
    )
    options = {"enable_checkpointing": False, **trainer_options}
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, gradient_clip_val=1.0, precision="32-true", logger=False,
        enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
        callbacks=[history, *callbacks], **options,
    )  # fmt: skip
    trainer.fit(module, data, ckpt_path=ckpt_path)
    assert trainer.global_step == steps and trainer.accumulate_grad_batches == 2
    return history.losses, {name: p.detach().clone() for name, p in module.model.named_parameters()}


def _assert_same_weights(actual: dict, expected: dict, rel: float) -> None:
    """Each weight tensor within `rel` of its own scale (max |w|)."""
    assert actual.keys() == expected.keys()
    for name, weight in expected.items():
        assert_close_to_scale(actual[name], weight, rel, what=name)


@pytest.mark.parametrize("position", ["rope", "repo"])
def test_chunked_loss_trains_as_the_eager_loss(position, one_thread):
    eager_losses, eager_weights = _train(_module(position=position))
    assert len(eager_losses) == 4
    for chunk in (7, 31):  # 62 targets per micro batch: 7 leaves a short last chunk, 31 divides them
        losses, weights = _train(_module(position=position, loss_chunk_tokens=chunk))
        assert_close_to_scale(losses, eager_losses, LOSS_REL, what=f"losses, chunks of {chunk}")
        _assert_same_weights(weights, eager_weights, WEIGHT_REL)


def _one_loss(module, batch):
    module.model.zero_grad(set_to_none=True)
    parts = module._losses(batch)
    parts.total.backward()
    grads = {name: p.grad.clone() for name, p in module.model.named_parameters() if p.grad is not None}
    return parts, grads


@pytest.mark.parametrize("given", ["padding", "labels"])
def test_chunked_loss_ignores_the_same_positions(given, one_thread):
    eager, chunked = _module(), _module(loss_chunk_tokens=5)
    eager.configure_model()
    chunked.configure_model()
    chunked.model.load_state_dict(eager.model.state_dict())
    input_ids = torch.randint(16, 256, (3, SEQ_LEN))
    if given == "padding":
        input_ids[0, 20:] = eager.model.config.pad_token_id  # a shorter row: its padding carries no loss
        input_ids[2, 9:] = eager.model.config.pad_token_id
        batch, expected = {"input_ids": input_ids}, 3 * (SEQ_LEN - 1) - 12 - 23
    else:
        labels = input_ids.clone()
        labels[:, :17] = IGNORE_INDEX  # a loss on completions only
        labels[1, 25:] = IGNORE_INDEX
        batch, expected = {"input_ids": input_ids, "labels": labels}, 3 * (SEQ_LEN - 17) - 7
    (want, want_grads), (got, got_grads) = _one_loss(eager, batch), _one_loss(chunked, batch)
    assert got.tokens == want.tokens == expected
    for field in ("total", "ce", "z"):
        assert_close_to_scale(getattr(got, field), getattr(want, field), LOSS_REL, what=field)
    assert got_grads.keys() == want_grads.keys()
    for name, grad in want_grads.items():
        assert_close_to_scale(got_grads[name], grad, 1e-5, what=f"gradient of {name}")


def _saved_bytes_after_the_decoder(module, batch) -> int:
    """Bytes of the activations autograd saves for backward from the decoder's output to the loss (parameters,
    which are held anyway, not counted; each storage once)."""
    saved = SavedStorages(module.model)
    saved.on = False

    def start(*_):
        saved.on = True

    handle = module.model.model.register_forward_hook(start)
    try:
        with saved.recording():
            module._losses(batch).total.backward()
    finally:
        handle.remove()
    assert saved.on
    return saved.total


def test_chunked_loss_saves_no_full_logits_for_backward(one_thread):
    eager, chunked = _module(), _module(loss_chunk_tokens=16)
    eager.configure_model()
    chunked.configure_model()
    batch = {"input_ids": torch.randint(16, 256, (4, SEQ_LEN))}
    logits_bytes = 4 * SEQ_LEN * eager.model.config.vocab_size * 4  # one float32 [tokens, vocab]
    eager_saved = _saved_bytes_after_the_decoder(eager, batch)
    chunked_saved = _saved_bytes_after_the_decoder(chunked, batch)
    assert eager_saved > logits_bytes, (eager_saved, logits_bytes)
    assert chunked_saved < logits_bytes, (chunked_saved, logits_bytes)


def test_fused_adamw_trains_as_the_default_adamw(one_thread):
    plain_losses, plain_weights = _train(_module())
    module = _module(fused_adamw=True)
    losses, weights = _train(module)
    assert all(group["fused"] for group in module.trainer.optimizers[0].param_groups)
    assert_close_to_scale(losses, plain_losses, LOSS_REL, what="losses")
    _assert_same_weights(weights, plain_weights, WEIGHT_REL)


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")  # the saver is not needed
def test_a_resume_may_turn_fused_adamw_on(tmp_path, one_thread):
    """The restored optimizer state says `fused: None`; the module's switch wins, the run goes on as unfused."""
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)  # the schedule spans 4 steps
    plain_losses, plain_weights = _train(_module(), callbacks=[saver], enable_checkpointing=True)
    module = _module(fused_adamw=True)
    losses, weights = _train(module, ckpt_path=tmp_path / "epoch=0-step=2.ckpt")
    groups = module.trainer.optimizers[0].param_groups
    assert all(group["fused"] for group in groups)
    assert all(module.trainer.optimizers[0].state[p]["step"] == 4 for group in groups for p in group["params"])
    assert_close_to_scale(losses, plain_losses[2:], LOSS_REL, what="losses after the resume")
    _assert_same_weights(weights, plain_weights, WEIGHT_REL)


@pytest.mark.parametrize("value", [-1, -4096])
def test_a_negative_loss_chunk_is_refused(value, tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError, match=r"^model\.loss_chunk_tokens must be a whole number >= 0") as err:
        _module(loss_chunk_tokens=value)
    assert "\n" not in str(err.value) and "or 0 to compute the loss of the whole micro batch" in str(err.value)
    argv = ["fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "run")]
    refused_in_one_line(
        "repo_train", [*argv, "--model.loss_chunk_tokens", str(value)], tmp_path, EXIT_USAGE,
        "model.loss_chunk_tokens must be a whole number >= 0", capsys, monkeypatch,
    )  # fmt: skip
