"""The two engine switches of `python -m repo_train fit`: selective activation checkpointing
(`model.activation_checkpointing`) and regional torch.compile (`model.compile`) give the eager run's numbers.

Checkpointing replays the same kernels on the same inputs, so its runs match the plain run to float noise; each
mode must also really keep fewer activations. Inductor's fused CPU kernels round differently in the last bits:
those runs are compared at 1e-4 of the values' scale, with AdamW's eps raised to 1e-3 (see `_fit`).
"""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
from loss_history import LossHistory
from saved_tensors import SavedStorages
from torch._dynamo.utils import counters

from repo_train.data import SyntheticData
from repo_train.training import regional_compile
from repo_train.training.activation_checkpointing import checkpointed_modules, decoder_layers
from repo_train.training.cli import TINY_TRAINER_DEFAULTS, _ParseOnlyCLI, check_arguments
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import RePoLightningModule

MODES = [True, "every_2", "attention", "mlp"]
STEPS = 4


def _fit(position: str, steps: int = STEPS, eps: float = 1e-8, **switches):
    """Losses of `steps` optimizer steps and the final weights of the tiny model (4 layers) on the synthetic data.

    AdamW divides each gradient by its running RMS, so an element whose gradient is ~0 moves by up to ±lr on the
    sign of float noise: compiled runs (other rounding) then differ by ~lr there. `eps` = 1e-3 in those
    comparisons keeps such elements still (measured: 4e-3 of the scale apart at eps 1e-8, 1e-7 at 1e-3).
    """
    pl.seed_everything(0, verbose=False)
    history = LossHistory()
    module = RePoLightningModule(lr=3e-3, eps=eps, position=position, attn_implementation="sdpa", **switches)
    data = RePoDataModule(train=SyntheticData(seq_len=32, num_samples=64), global_batch_size=4, micro_batch_size=4)
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, use_distributed_sampler=False, gradient_clip_val=1.0, callbacks=[history],
    )  # fmt: skip
    trainer.fit(module, data)
    weights = {name: value.detach().clone() for name, value in module.model.state_dict().items()}
    return torch.tensor(history.losses), weights, module


@functools.cache
def _eager(position: str, eps: float = 1e-8):
    losses, weights, _ = _fit(position, eps=eps)
    return losses, weights


def _assert_same_run(actual, expected, rel: float) -> None:
    """Losses and every weight equal within rtol = `rel` plus atol = `rel` / 10 × max |value| of the tensor."""
    (losses, weights), (expected_losses, expected_weights) = actual, expected
    assert len(losses) == STEPS
    torch.testing.assert_close(losses, expected_losses, rtol=rel, atol=rel / 10 * expected_losses.abs().max().item())
    assert list(weights) == list(expected_weights)
    for name, value in expected_weights.items():
        atol = rel / 10 * value.abs().max().item()
        torch.testing.assert_close(weights[name], value, rtol=rel, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture
def compile_backend(monkeypatch):
    """Sets `regional_compile.BACKEND` for one test; forgets compiled graphs afterwards."""
    yield lambda backend: monkeypatch.setattr(regional_compile, "BACKEND", backend)
    torch._dynamo.reset()


# ---------------------------------------------------------------- activation checkpointing


@pytest.mark.parametrize("position", ["rope", "repo"])
@pytest.mark.parametrize("mode", MODES, ids=str)
def test_checkpointing_mode_gives_the_plain_losses_and_weights(mode, position):
    losses, weights, module = _fit(position, activation_checkpointing=mode)
    layers = list(decoder_layers(module.model))
    expected = {
        True: layers,
        "every_2": [layers[1], layers[3]],
        "attention": [layer.self_attn for layer in layers],
        "mlp": [layer.mlp for layer in layers],
    }[mode]
    assert checkpointed_modules(module.model) == expected
    _assert_same_run((losses, weights), _eager(position), rel=1e-5)


def _saved_activation_bytes(mode) -> int:
    """Bytes of the activations one training forward keeps for backward (autograd's saved tensors plus the
    inputs each checkpointed module holds for its replay), parameters left out, each storage counted once."""
    pl.seed_everything(0, verbose=False)
    module = RePoLightningModule(position="repo", attn_implementation="sdpa", activation_checkpointing=mode)
    module.configure_model()
    model = module.model
    saved = SavedStorages(model)

    def keep_inputs(_, args, kwargs):
        for value in [*args, *kwargs.values()]:
            for tensor in value if isinstance(value, tuple) else [value]:
                if isinstance(tensor, torch.Tensor):
                    saved.keep(tensor)

    hooks = [m.register_forward_pre_hook(keep_inputs, with_kwargs=True) for m in checkpointed_modules(model)]
    ids = torch.randint(3, 256, (2, 64))
    with saved.recording():
        loss = model(input_ids=ids, use_cache=False).logits.float().logsumexp(-1).mean()
    loss.backward()  # the replays work under the measurement's hooks too
    for hook in hooks:
        hook.remove()
    return saved.total


def test_each_checkpointing_mode_keeps_fewer_activations():
    saved = {mode: _saved_activation_bytes(mode) for mode in [False, *MODES]}
    assert saved[True] < saved["every_2"] < saved[False], saved
    assert saved["attention"] < saved[False] and saved["mlp"] < saved[False], saved


def test_checkpointing_values_parse_and_others_are_refused(tmp_path):
    def parsed(*args):
        cli = _ParseOnlyCLI(
            RePoLightningModule, RePoDataModule, trainer_defaults=TINY_TRAINER_DEFAULTS, run=False, args=list(args)
        )
        return cli.config.model.activation_checkpointing, cli.config.model.compile

    assert parsed() == (False, False)
    assert parsed("--model.activation_checkpointing", "every_2", "--model.compile", "true") == ("every_2", True)
    assert parsed("--model.activation_checkpointing", "true") == (True, False)
    config = tmp_path / "switches.yaml"
    for value, expected in [("every_3", "every_3"), ("mlp", "mlp"), ("attention", "attention"), ("true", True)]:
        config.write_text(f"model:\n  activation_checkpointing: {value}\n")
        assert parsed("--config", str(config))[0] == expected
    for bad in ["every_0", "every_x", "Attention", "yes please"]:
        with pytest.raises(ValueError, match=r"^activation_checkpointing: .* is not valid; use true .* every_K .* mlp"):
            RePoLightningModule(activation_checkpointing=bad)
        argv = ["fit", "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path / "run")]
        with pytest.raises(ValueError, match=r"^--model.activation_checkpointing: .* is not valid; use true"):
            check_arguments([*argv, "--model.activation_checkpointing", bad])
    with pytest.raises(ValueError, match="every_K"):
        RePoLightningModule(activation_checkpointing=2)


# ---------------------------------------------------------------- regional compile


def test_compile_makes_each_layer_a_compiled_module_with_the_same_keys(compile_backend):
    """The wiring, fast (backend "eager": dynamo traces each layer, no code generation): every decoder layer is
    compiled in place without a graph break, nothing else is, the state dict keeps its keys, and two steps train
    as eagerly."""
    compile_backend("eager")
    counters.clear()
    losses, weights, module = _fit("repo", steps=2, compile=True, activation_checkpointing="attention")
    assert not counters["graph_break"], dict(counters["graph_break"])  # each layer, REPO's rotation too, is one graph
    model = module.model
    compiled = [name for name, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
    assert compiled == [f"model.layers.{i}" for i in range(len(decoder_layers(model)))]
    assert not any("_orig_mod" in key for key in module.state_dict())
    assert list(weights) == list(_eager("repo")[1])
    assert checkpointed_modules(model) == [layer.self_attn for layer in decoder_layers(model)]
    expected, _, _ = _fit("repo", steps=2)
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())


@pytest.mark.slow  # inductor generates and builds C++ for each layer kind: about a minute per run on a CPU
@pytest.mark.parametrize(
    ("position", "checkpointing"), [("rope", False), ("repo", False), ("repo", True), ("repo", "attention")]
)
def test_compiled_layers_train_as_eager(position, checkpointing, compile_backend):
    compile_backend("inductor")
    losses, weights, _ = _fit(position, eps=1e-3, compile=True, activation_checkpointing=checkpointing)
    _assert_same_run((losses, weights), _eager(position, eps=1e-3), rel=1e-4)
