"""The training memory plan (`repo_train.training.memory_plan`) against what the code holds and what GPUs measured.

- its activation term against the bytes autograd saves for backward (saved-tensor hooks, storages
  counted once, weights left out), several shapes, RoPE and REPO, bf16 and float32, GQA included;
- checkpointed layers against the CPU allocator's bytes still held when backward starts;
- the loss term against the allocator's peak of `lm_loss`'s forward and backward;
- the total against every peak measured on one H200 (docs/measurements/benchmark-fit-h200-2026-11-28.json);
- the plan of `fit` (memory, hours, the refusal of a setting that does not fit, naming one that does).
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch
from saved_tensors import SavedStorages
from torch.profiler import record_function

from repo_train.cli import main as repo_train_main
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.accounting import config_parameter_report
from repo_train.modeling.methods import resolve_position
from repo_train.modeling.presets import preset, tiny
from repo_train.training.cli import plan_arguments
from repo_train.training.memory_plan import (
    GIB,
    LOSS_BYTES_PER_LOGIT,
    MemorySetting,
    activation_bytes,
    checkpointing_plan,
    plan_memory,
)
from repo_train.training.module import enable_activation_checkpointing
from repo_train.training.objective import chunked_lm_loss, lm_loss
from repo_train.training.plan import training_plan
from workflows.benchmarking import trace_allocations

ROOT = Path(__file__).resolve().parents[2]
H200_FILE = ROOT / "docs/measurements/benchmark-fit-h200-2026-11-28.json"

SHAPES = {
    "narrow": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4),
    "wide-ffn": dict(hidden_size=96, intermediate_size=512, num_hidden_layers=3, num_attention_heads=6),
    "gqa": dict(
        hidden_size=128, intermediate_size=320, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2
    ),
}


def tiny_config(shape: str, method: str):
    fields = {"num_key_value_heads": SHAPES[shape]["num_attention_heads"], **SHAPES[shape]}
    extra = {"repo_start_layer": 1} if method == "repo" else {}
    config = tiny(position_method=method, vocab_size=256, **fields, **extra)
    config._attn_implementation = "sdpa"
    return config


def saved_for_backward(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves in one forward to the logits, weights left out."""
    with SavedStorages(model).recording() as saved:
        model(input_ids=ids, use_cache=False)
    return saved.total


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("method", ["rope", "repo"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_activation_term_is_what_autograd_saves(shape, method, dtype):
    torch.manual_seed(0)
    config = tiny_config(shape, method)
    model = RePoOlmo2ForCausalLM(config).to(dtype).train()
    batch, seq_len = 2, 96
    ids = torch.randint(2, 256, (batch, seq_len))
    measured = saved_for_backward(model, ids)
    precision = "bf16-mixed" if dtype == torch.bfloat16 else "32-true"
    predicted, recomputed = activation_bytes(MemorySetting(config, seq_len, batch, precision=precision))
    assert recomputed == 0
    assert predicted == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("method", ["rope", "repo"])
def test_checkpointed_layers_keep_their_inputs_only(method):
    """Held when backward starts (CPU allocator), for every `model.activation_checkpointing` mode, against the
    plan: a recomputed layer or block keeps only its input."""
    torch.manual_seed(0)
    config = tiny_config("wide-ffn", method)
    batch, seq_len = 2, 128
    ids = torch.randint(2, 256, (batch, seq_len))
    held = {}
    for mode in (False, True, "every_2", "attention", "mlp"):
        model = RePoOlmo2ForCausalLM(config).train()
        enable_activation_checkpointing(model, mode)

        def step(model=model):
            hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
            with record_function("backward"):
                hidden.float().sum().backward()

        # the previous mode's model sits in a reference cycle (its checkpointed modules' bound forwards): freed
        # by the cycle collector now, not in the middle of this trace, where its frees would count against it
        gc.collect()
        held[mode] = trace_allocations(step).before("backward")
        predicted, _ = activation_bytes(
            MemorySetting(config, seq_len, batch, precision="32-true", activation_checkpointing=mode)
        )
        assert predicted == pytest.approx(held[mode], rel=0.05), mode
    assert held[True] < held["every_2"] < held[False] and held[True] < held[False] / 5
    assert held["attention"] < held[False] and held["mlp"] < held[False]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_loss_peak_is_twenty_bytes_a_logit(dtype):
    torch.manual_seed(0)
    tokens, vocab = 384, 3000
    hidden = torch.randn(1, tokens, 32, dtype=dtype, requires_grad=True)
    head = torch.randn(32, vocab, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (1, tokens))

    def step():
        lm_loss(hidden @ head, labels).total.backward()

    assert trace_allocations(step).peak == pytest.approx(LOSS_BYTES_PER_LOGIT * tokens * vocab, rel=0.02)


def olmo2_1b(method: str):
    position = {"class_path": "RepoPosition", "init_args": {"start_layer": 5}} if method == "repo" else "rope"
    return preset("olmo2-1b", **resolve_position(position).model_config_fields())


def h200_runs() -> list[dict]:
    calls = json.loads(H200_FILE.read_text())["calls"]
    return [run for call in calls for run in call["runs"] if run["status"] == "ok"]


def test_total_matches_every_peak_measured_on_the_h200():
    """`fit` of the 1B configs on one H200 (ZeRO-2, bf16-mixed, sequence 4,096): the issue asks for 10%."""
    runs = h200_runs()
    assert len(runs) == 6  # RoPE with checkpointing at micro batch 4 ran twice
    for run in runs:
        setting = MemorySetting(
            olmo2_1b(run["method"]),
            4096,
            run["micro_batch"],
            world_size=1,
            activation_checkpointing=run["activation_checkpointing"],
        )
        predicted = plan_memory(setting).peak / GIB
        assert predicted == pytest.approx(run["peak_memory_gib"], rel=0.10), run
    # micro batch 8 without checkpointing ran out of the H200's 140 GiB
    assert plan_memory(MemorySetting(olmo2_1b("rope"), 4096, 8)).peak / GIB > 140


def test_sharding_and_a_chunked_loss_lower_the_peak_as_counted():
    config = olmo2_1b("repo")
    one = plan_memory(MemorySetting(config, 4096, 4, world_size=1))
    eight = plan_memory(MemorySetting(config, 4096, 4, world_size=8))
    n = one.parts["weights"] / 2  # bf16 weights: 2 bytes a parameter
    # ZeRO-2 shards gradients, master weights and moments (14 bytes a parameter) and adds its buckets
    assert one.peak - eight.peak == pytest.approx(14 * n * 7 / 8 - 2 * 200_000_000 * 2, rel=1e-9)
    chunked = plan_memory(MemorySetting(config, 4096, 4, world_size=8, loss_chunk_tokens=1024))
    assert eight.peak - chunked.peak == pytest.approx(LOSS_BYTES_PER_LOGIT * (4 * 4096 - 1024) * 100352, rel=1e-9)


def test_checkpointing_modes_are_read_as_the_module_reads_them():
    assert checkpointing_plan(False, 3) == ["none"] * 3
    assert checkpointing_plan(True, 3) == ["layer"] * 3
    assert checkpointing_plan("every_2", 4) == ["none", "layer", "none", "layer"]
    assert checkpointing_plan("mlp", 2) == ["mlp", "mlp"]
    with pytest.raises(ValueError, match="every_K"):
        checkpointing_plan("sometimes", 2)
    # the same modules the module's own checkpointing wraps
    model = RePoOlmo2ForCausalLM(tiny_config("wide-ffn", "rope"))
    wrapped = enable_activation_checkpointing(model, "every_2")
    assert wrapped == [
        model.model.layers[index] for index, part in enumerate(checkpointing_plan("every_2", 3)) if part == "layer"
    ]


def fit_values(**given):
    """A parsed `fit` section as `value(dotted key)`: the 1B config's settings, overridden by `given`."""
    values = {
        "model.init_from": None,
        "model.preset_name": "olmo2-1b",
        "model.position": "rope",
        "model.config_overrides": None,
        "model.activation_checkpointing": False,
        "trainer.devices": 4,
        "trainer.num_nodes": 1,
        "trainer.strategy": {"class_path": "pytorch_lightning.strategies.DeepSpeedStrategy", "init_args": {}},
        "trainer.precision": "bf16-mixed",
        "trainer.max_steps": 23842,
        "data.train": {"class_path": "repo_train.data.SyntheticData", "init_args": {"seq_len": 4096}},
        "data.micro_batch_size": 4,
        "data.global_batch_size": 512,
        "throughput.peak_tflops_per_device": 989.0,
        "plan.gpu_memory_gib": 79.0,
    }
    values.update(given)
    return values.get


def test_hours_come_from_the_matching_measurement():
    plan = training_plan(fit_values())
    tokens = 23842 * 512 * 4096
    assert plan.hours == pytest.approx(tokens / (32083 * 4) / 3600, rel=1e-9)
    assert "32,083 tokens/s" in plan.hours_basis and "H200" in plan.hours_basis and "2026-11-28" in plan.hours_basis
    nearest = training_plan(fit_values(**{"data.micro_batch_size": 2}))
    assert "micro batch 2, not 4" in nearest.hours_basis
    assumed = training_plan(fit_values(**{"model.activation_checkpointing": "every_2"}))
    assert "assumed 40% MFU" in assumed.hours_basis and assumed.hours > 0


def test_a_setting_that_does_not_fit_is_refused_naming_one_that_does():
    plan = training_plan(fit_values())  # micro batch 4 without checkpointing or a chunked loss: 77 GiB on 4
    assert not plan.fits
    refusal = plan.refusal()
    assert "does not fit a 79 GiB GPU with 10% to spare (71.1 GiB)" in refusal
    assert "--model.loss_chunk_tokens 4096 would" in refusal and "\n" not in refusal
    fixed = training_plan(fit_values(**{"model.loss_chunk_tokens": 4096}))
    assert fixed.fits and fixed.refusal() is None
    hopeless = training_plan(fit_values(**{"model.preset_name": "olmo2-7b", "trainer.devices": 1}))
    assert "use more GPUs" in hopeless.refusal()


def test_a_chunked_loss_holds_one_chunk_of_logits():
    """`chunked_lm_loss`'s forward and backward peak at about one chunk's 20 bytes a logit (the hidden states'
    copy and gradient and the head's weight gradient add a little), not the whole batch's."""
    torch.manual_seed(0)
    tokens, vocab, chunk = 2048, 3000, 512
    head = torch.nn.Linear(64, vocab, bias=False)
    hidden = torch.randn(1, tokens, 64, requires_grad=True)
    labels = torch.randint(0, vocab, (1, tokens))

    def step():
        chunked_lm_loss(hidden, head, labels, chunk).total.backward()

    peak = trace_allocations(step).peak
    assert peak == pytest.approx(LOSS_BYTES_PER_LOGIT * chunk * vocab, rel=0.10)
    assert peak < LOSS_BYTES_PER_LOGIT * tokens * vocab / 3


GPU_CONFIGS = sorted(p.name for p in (ROOT / "configs/train").glob("olmo2-*.yaml"))


@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_each_shipped_gpu_config_fits_its_gpus_with_headroom(name):
    """As `fit --plan.only` judges it: the config's own GPU count, its GPU memory, 10% to spare."""
    plan = plan_arguments(["fit", "--config", str(ROOT / "configs/train" / name)])
    assert plan.gpu_memory_gib == 79 and plan.memory.setting.world_size in (4, 8)
    assert plan.fits and plan.memory.peak <= 0.9 * 79 * GIB
    assert plan.global_batch == 512  # the paper's batch, kept through accumulation


def test_fit_plan_only_prints_the_plan_or_refuses_in_one_line(capsys):
    config = str(ROOT / "configs/train/olmo2-1b-stage2-repo.yaml")
    assert repo_train_main(["fit", "--config", config, "--plan.only", "true"]) == 0
    printed = capsys.readouterr().out
    assert "peak ≈ 54.8 GiB per GPU of 79" in printed and "this run differs: loss chunk 4096 (not measured)" in printed
    too_big = ["--model.loss_chunk_tokens", "0", "--trainer.devices", "1"]
    assert repo_train_main(["fit", "--config", config, "--plan.only", "true", *too_big]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "does not fit a 79 GiB GPU" in error and "would (" in error


def test_fsdp2_shards_every_state_and_gathers_units_in_bf16():
    config = olmo2_1b("rope")
    plan = plan_memory(MemorySetting(config, 4096, 4, world_size=4, strategy="fsdp2", loss_chunk_tokens=4096))
    n = config_parameter_report(config).total
    embeddings = 2 * config.vocab_size * config.hidden_size
    layer = (n - embeddings) // config.num_hidden_layers
    states = sum(v for k, v in plan.parts.items() if "activations" not in k and "loss" not in k)
    assert states == pytest.approx(16 * n / 4 + 2 * (2 * layer + embeddings), rel=1e-9)
    fsdp2 = {"class_path": "pytorch_lightning.strategies.ModelParallelStrategy", "init_args": {}}
    planned = training_plan(fit_values(**{"trainer.strategy": fsdp2, "model.loss_chunk_tokens": 4096}))
    assert planned.memory.setting.strategy == "fsdp2" and "FSDP2 (not measured)" in planned.hours_basis


def test_zero_stages_shard_what_they_name():
    config = olmo2_1b("rope")
    n = config_parameter_report(config).total
    peaks = {
        stage: plan_memory(MemorySetting(config, 4096, 1, world_size=8, zero_stage=stage, loss_chunk_tokens=4096))
        for stage in (1, 2, 3)
    }
    states = {
        stage: sum(v for k, v in p.parts.items() if "activ" not in k and "loss" not in k and "step" not in k)
        for stage, p in peaks.items()
    }
    assert states[1] - states[2] == pytest.approx(2 * n * 7 / 8, rel=1e-9)  # gradients sharded from stage 2
    assert states[2] > states[3]  # weights sharded at stage 3 (two layers and the embeddings gathered)
    with pytest.raises(ValueError, match="stages are 0 to 3"):
        MemorySetting(config, 4096, 1, zero_stage=4)
