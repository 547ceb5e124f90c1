"""FSDP2 through Lightning's ModelParallelStrategy, on CPU processes (gloo).

Fast: the sharding function and the gradient norm on a 1-process gloo group; the readers of a distributed
(DCP) checkpoint directory on one written without a process group. Slow: two torchrun processes under
FSDP2 match one plain process, resume exactly (directory and single-file checkpoints, and 2 -> 1 process),
and export the weights they trained.
"""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from float_checks import assert_close_to_scale
from transformers import AutoModelForCausalLM

import repo_train  # noqa: F401
from repo_train.checkpoints import (
    load_lightning_checkpoint,
    newest_last_checkpoint,
    read_hyperparameters,
    read_interruption,
)
from repo_train.export import export_checkpoint
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import preset
from repo_train.training.checks import check_resume
from repo_train.training.fsdp2 import clip_grad_norm, shard_model

TINY_RUN = Path(__file__).with_name("tiny_run.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _tiny_model(seed=0):
    torch.manual_seed(seed)
    config = preset("tiny")
    config._attn_implementation = "sdpa"
    return RePoOlmo2ForCausalLM(config)


@pytest.fixture
def one_process_group():
    """A 1-process gloo group and its 1-D device mesh (FSDP2 needs one), torn down after the test."""
    from torch.distributed.device_mesh import init_device_mesh

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def test_shard_model_gives_the_plain_models_logits_and_gradient_norm(one_process_group):
    """Every layer and the root become FSDP units with DTensor weights; forward, backward and the clipped
    gradients are those of the unsharded model (one process: the shard is the whole tensor)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    plain, sharded = _tiny_model(), _tiny_model()
    shard_model(sharded, one_process_group, "32-true")
    assert isinstance(sharded, FSDPModule) and all(isinstance(layer, FSDPModule) for layer in sharded.model.layers)
    assert all(isinstance(p, DTensor) for p in sharded.parameters())
    ids = torch.randint(16, 256, (2, 16))
    for model in (plain, sharded):
        model(input_ids=ids, labels=ids).loss.backward()
    want = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
    got = clip_grad_norm(sharded.parameters(), 0.5)
    assert not isinstance(got, DTensor)  # what train/grad_norm logs
    assert_close_to_scale(got, want, 1e-6, what="grad norm")
    for (name, p), q in zip(plain.named_parameters(), sharded.parameters(), strict=True):
        assert_close_to_scale(q.grad.full_tensor(), p.grad, 1e-5, scale=want, what=f"clipped grad of {name}")
    with torch.no_grad():
        assert_close_to_scale(sharded(input_ids=ids).logits, plain(input_ids=ids).logits, 1e-6, what="logits")


def test_shard_model_refuses_true_16_bit_precision(one_process_group):
    with pytest.raises(ValueError, match="bf16-true.*use bf16-mixed"):
        shard_model(_tiny_model(), one_process_group, "bf16-true")


def test_clip_grad_norm_is_torchs_for_plain_tensors():
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    for p, q in zip(a, b, strict=True):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    assert torch.equal(clip_grad_norm(a, 1.0), torch.nn.utils.clip_grad_norm_(b, 1.0))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a, b, strict=True))
    assert clip_grad_norm([torch.nn.Parameter(torch.zeros(2))], 1.0) is None  # no gradients: nothing to log


def _write_dcp(directory: Path, model, extra=None) -> None:
    """The layout ModelParallelStrategy writes, without processes: DCP files of `state_dict` and an
    optimizer value, and Lightning's meta.pt."""
    import torch.distributed.checkpoint as dcp

    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    dcp.save(
        {"state_dict": state, "optimizer_0": {"param_groups": [{"lr": 0.1}]}}, checkpoint_id=directory, no_dist=True
    )
    meta = {
        "global_step": 3,
        "model_config": model.config.to_dict(),
        "hyper_parameters": {"preset_name": "tiny", "_instantiator": "x"},
        "datamodule_hyper_parameters": {"global_batch_size": 8},
        **(extra or {}),
    }
    torch.save(meta, directory / "meta.pt")


def test_distributed_checkpoint_directory_is_read_and_exported(tmp_path):
    model = _tiny_model(seed=3)
    ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    _write_dcp(ckpt, model, {"repo_train_interrupted": {"signal": "SIGTERM", "step": 3}})
    assert read_hyperparameters(ckpt) == {"model": {"preset_name": "tiny"}, "data": {"global_batch_size": 8}}
    assert read_interruption(ckpt) == {"signal": "SIGTERM", "step": 3}
    state = load_lightning_checkpoint(ckpt)
    assert state["global_step"] == 3 and set(state["state_dict"]) == {f"model.{k}" for k in model.state_dict()}
    exported = export_checkpoint(ckpt, tmp_path / "hf", with_tokenizer=False)
    ids = torch.randint(16, 256, (2, 12))
    with torch.no_grad():
        assert torch.equal(exported.eval()(ids).logits, model.eval()(ids).logits)
    # found as the run's last checkpoint, by the newest file inside it
    assert newest_last_checkpoint(tmp_path) == ckpt
    # it resumes only under ModelParallelStrategy, on any process count
    check_resume(str(ckpt), world_size=3, model_parallel=True)
    with pytest.raises(ValueError, match="distributed .FSDP2. checkpoint directory; it resumes only with"):
        check_resume(str(ckpt), world_size=1)


def test_distributed_checkpoint_refusals(tmp_path):
    ckpt = tmp_path / "step.ckpt"
    _write_dcp(ckpt, _tiny_model())
    (ckpt / "meta.pt").unlink()
    with pytest.raises(ValueError, match="incomplete distributed checkpoint: no meta.pt"):
        read_hyperparameters(ckpt)
    with pytest.raises(ValueError, match="incomplete distributed checkpoint: no meta.pt"):
        check_resume(str(ckpt), world_size=1, model_parallel=True)
    # A crafted .metadata cannot run code: DCP itself would unpickle it with plain pickle.load.
    _write_dcp(ckpt, _tiny_model())
    crafted = pickle.dumps(type("X", (), {"__reduce__": lambda self: (os.system, ("true",))})())
    (ckpt / ".metadata").write_bytes(crafted)
    with pytest.raises(ValueError, match="refused to unpickle posix.system"):
        load_lightning_checkpoint(ckpt)


def _torchrun(tmp_path, name, *args, nproc=2):
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(TINY_RUN)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [*cmd, str(out), *args], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # torchrun: one plain process, then FSDP2 on two processes, resumed on two and on one
def test_fsdp2_on_two_cpu_processes_matches_resumes_and_exports(tmp_path):
    single = _torchrun(tmp_path, "single", "--steps", "6", "--micro_batch", "8", nproc=1)
    common = ["--strategy", "fsdp2", "--steps", "6", "--micro_batch", "4"]
    full = _torchrun(
        tmp_path, "fsdp2", *common, "--devices", "2", "--ckpt_every", "3", "--ckpt_dir", "ck", "--logits_out", "l.pt"
    )
    # measured 2e-7: the same model, the gradient averaged by a reduce-scatter instead of one batch of 8
    assert_close_to_scale(full["losses"], single["losses"], 1e-5, what="losses")
    step3 = tmp_path / "ck" / "epoch=0-step=3.ckpt"
    assert sorted(p.name for p in step3.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    resumed = _torchrun(tmp_path, "resumed", *common, "--devices", "2", "--resume", str(step3))
    assert_close_to_scale(resumed["losses"], full["losses"][3:], 1e-6, what="losses")
    # DCP reshards on load: the same checkpoint resumes on one process (with the whole batch)
    one = _torchrun(tmp_path, "one", *common, "--devices", "1", "--micro_batch", "8", "--resume", str(step3), nproc=1)
    assert_close_to_scale(one["losses"], full["losses"][3:], 1e-5, what="losses")
    check_resume(str(step3), world_size=1, model_parallel=True)
    # the export holds the weights the processes trained
    exported = export_checkpoint(tmp_path / "ck" / "last.ckpt", tmp_path / "hf", with_tokenizer=False)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    from tiny_run import LOGITS_IDS

    with torch.no_grad():
        trained = torch.load(tmp_path / "l.pt")
        assert_close_to_scale(reloaded(LOGITS_IDS).logits, trained, 1e-6, what="logits")
        assert torch.equal(reloaded(LOGITS_IDS).logits, exported.eval()(LOGITS_IDS).logits)


@pytest.mark.slow  # torchrun: FSDP2 on two processes writing single-file checkpoints, and its resume
def test_fsdp2_single_file_checkpoint_resumes_exactly(tmp_path):
    common = ["--strategy", "fsdp2", "--devices", "2", "--steps", "6", "--micro_batch", "4", "--single_file"]
    full = _torchrun(tmp_path, "full", *common, "--ckpt_every", "3", "--ckpt_dir", "ck")
    step3 = tmp_path / "ck" / "epoch=0-step=3.ckpt"
    assert step3.is_file()
    resumed = _torchrun(tmp_path, "resumed", *common, "--resume", str(step3))
    assert_close_to_scale(resumed["losses"], full["losses"][3:], 1e-6, what="losses")
    assert load_lightning_checkpoint(tmp_path / "ck" / "last.ckpt")["global_step"] == 6


def test_a_chunked_loss_under_fsdp2_is_the_plain_models(one_process_group):
    """The chunked loss calls the decoder and the head directly, not the root's forward: their own FSDP units
    gather their weights, so two steps give the plain model's losses and gradients."""
    from repo_train.training.objective import chunked_lm_loss, shift_labels

    plain, sharded = _tiny_model(), _tiny_model()
    shard_model(sharded, one_process_group, "32-true")
    ids = torch.randint(16, 256, (2, 16))
    labels = shift_labels(ids)
    for _ in range(2):
        losses = []
        for model in (plain, sharded):
            hidden = model.model(input_ids=ids).last_hidden_state
            loss = chunked_lm_loss(hidden, model.lm_head, labels, 7).total
            loss.backward()
            losses.append(loss.detach())
        assert_close_to_scale(losses[1], losses[0], 1e-6, what="chunked loss")
    for (name, p), q in zip(plain.named_parameters(), sharded.parameters(), strict=True):
        assert_close_to_scale(q.grad.full_tensor(), p.grad, 1e-5, what=f"grad of {name}")
