"""The training command line: shipped configs, the tiny default, torchrun + DeepSpeed, bad input."""

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from repo_train.byte_tokenizer import byte_tokenizer
from repo_train.data import DataSource, SyntheticData, SyntheticTextData
from repo_train.modeling.presets import preset
from repo_train.training.cli import TINY_TRAINER_DEFAULTS, _ParseOnlyCLI, check_config_file
from repo_train.training.datamodule import RePoDataModule
from repo_train.training.module import NonFiniteLossError, RePoLightningModule

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(glob.glob(str(ROOT / "configs" / "train" / "*.yaml")))


def _cli(*args, cwd, torchrun_procs=0, timeout=600):
    prefix = [sys.executable, "-m"]
    if torchrun_procs:
        prefix += ["torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun_procs}", "-m"]
    return subprocess.run(
        [*prefix, "repo_train", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
    )


def test_configs_are_shipped():
    names = {Path(c).stem for c in CONFIGS}
    expected = {f"olmo2-1b-stage2-{m}" for m in ("rope", "nope", "r2n1", "n2r1", "repo")}
    assert expected | {"olmo2-7b-stage2-rope", "olmo2-7b-stage2-repo", "tiny-repo"} <= names


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: Path(c).stem)
def test_every_shipped_config_parses_and_checks(config, monkeypatch):
    monkeypatch.chdir(ROOT)
    summary = check_config_file(config)
    name = Path(config).stem
    if name.startswith("olmo2-"):
        assert summary["max_steps"] == 23842 and summary["seed"] == 42
        assert summary["tokens_per_step"] == 512 * 4096
        assert summary["tokens_per_step"] * summary["max_steps"] == pytest.approx(50e9, rel=1e-4)
        assert summary["every_n_train_steps"] == 1000
        assert summary["accumulation"] == 32
        assert summary["lr"] == pytest.approx(7.4487e-5)
        model = summary["model"]
        assert model.position_method == name.rsplit("-", 1)[1]
        if name == "olmo2-1b-stage2-repo":
            assert model.repo_start_layer == 5 and model.num_hidden_layers == 16
        if name == "olmo2-7b-stage2-repo":
            assert model.repo_start_layer == 10 and model.num_hidden_layers == 32


@pytest.mark.slow  # the CLI in a subprocess
def test_unknown_config_key_fails_before_training(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs/train/tiny-repo.yaml").read_text().replace("lr: 0.003", "learning_rate: 0.003"))
    result = _cli("fit", "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert "learning_rate" in result.stderr


@pytest.mark.slow  # the CLI in a subprocess: fit, then export
def test_tiny_default_trains_and_exports(tmp_path):
    result = _cli(
        "fit",
        "--trainer.max_steps", "6",
        "--trainer.default_root_dir", "run",
        "--checkpoint.every_n_train_steps", "3",
        "--progress_log.every_n_steps", "3",
        "--progress_log.every_seconds", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # Output to a pipe (as to a log file): no bar, plain lines; Lightning's known-harmless notes are gone.
    output = result.stdout + result.stderr
    # a line at the start and after the first step (its time gives the ETA), then every 3 steps, and the last
    for line in ("train step: starting at step 0 of 6", "train step: 1/6 (17%)", "train step: 4/6 (67%)",
                 "train step: 6/6 (100%)"):  # fmt: skip
        assert line in result.stderr, output[-3000:]
    assert "Epoch 0" not in output and "it/s" not in output
    for note in ("LightningCLI's args parameter", "LeafSpec", "litlogger", "across ranks is zero"):
        assert note not in output, output[-3000:]
    last = next((tmp_path / "run").rglob("last.ckpt"))
    result = _cli("export", "--checkpoint", str(last), "--out", "hf", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()


#: The CPU training setups a user runs as shipped: `fit` alone, and the two tiny configs (the DeepSpeed one
#: under torchrun with two processes, as its header says). Each exports a directory the evaluation takes as is.
CPU_SETUPS = {
    "default": ([], 0),
    "tiny-repo": (["--config", str(ROOT / "configs/train/tiny-repo.yaml")], 0),
    "tiny-repo-deepspeed-cpu": (["--config", str(ROOT / "configs/train/tiny-repo-deepspeed-cpu.yaml")], 2),
}


@pytest.mark.parametrize("setup", list(CPU_SETUPS))
def test_the_cpu_setups_train_a_model_sized_to_the_tokenizer_of_their_data(setup, tmp_path, monkeypatch):
    """Their data names the byte tokenizer (so the export can carry it) and their model has its vocabulary and
    special ids; `default` is what `fit` without a config parses to."""
    monkeypatch.chdir(tmp_path)
    cli = _ParseOnlyCLI(
        RePoLightningModule,
        RePoDataModule,
        trainer_defaults=TINY_TRAINER_DEFAULTS,
        run=False,
        args=CPU_SETUPS[setup][0],
    )
    source = DataSource.from_config(cli.config.data.train.as_dict())
    assert isinstance(source, SyntheticTextData) and source.tokenizer == "byte"
    model, byte = preset(cli.config.model.preset_name), byte_tokenizer()
    assert (model.vocab_size, model.pad_token_id, model.eos_token_id) == (len(byte), 0, 1)
    assert (byte.pad_token_id, byte.eos_token_id) == (0, 1)


@pytest.mark.slow  # per setup: fit (4 steps; torchrun with two DeepSpeed processes for one), export, evaluation
@pytest.mark.parametrize("setup", list(CPU_SETUPS))
def test_every_cpu_setup_trains_exports_and_is_evaluated_as_it_is(setup, tmp_path):
    """The export of each shipped CPU setup carries the tokenizer its run trained with, and `python -m evaluation
    run --model EXPORT` takes the directory as it is and writes its records."""
    config, processes = CPU_SETUPS[setup]
    fit = _cli(
        "fit", *config, "--trainer.max_steps", "4", "--trainer.default_root_dir", "run",
        "--trainer.enable_progress_bar", "false", cwd=tmp_path, torchrun_procs=processes,
    )  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    last = tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    export = _cli("export", "--checkpoint", str(last), "--out", "hf", cwd=tmp_path)
    assert export.returncode == 0, export.stderr[-3000:]
    assert "the tokenizer of data.train.tokenizer: byte" in export.stdout
    manifest = json.loads((tmp_path / "hf" / "export.json").read_text())
    assert manifest["tokenizer"] == {"location": "byte", "from": "data.train.tokenizer"}
    evaluation = subprocess.run(
        [sys.executable, "-m", "evaluation", "run", "--model", "hf", "--tasks", "kv", "--num_keys", "4",
         "--num_examples", "2", "--max_new_tokens", "4", "--no_report", "--no_progress", "--out", "eval"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
    )  # fmt: skip
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "eval" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 4 and {r["task"] for r in records} == {"kv"}  # 2 examples x 4 gold positions


@pytest.mark.slow  # torchrun, two DeepSpeed processes
def test_torchrun_deepspeed_cpu_config(tmp_path):
    result = _cli(
        "fit",
        "--config", str(ROOT / "configs/train/tiny-repo-deepspeed-cpu.yaml"),
        "--trainer.max_steps", "4",
        "--trainer.default_root_dir", "run",
        "--trainer.enable_progress_bar", "false",
        "--data.train.seq_len", "32", "--data.train.num_samples", "256",  # the config names SyntheticData
        cwd=tmp_path,
        torchrun_procs=2,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shards = sorted(p.name for p in (tmp_path / "run").rglob("zero_pp_rank_*_optim_states.pt"))
    assert len(shards) >= 2


@pytest.mark.slow  # the CLI in a subprocess, six times
@pytest.mark.parametrize(
    "args, message",
    [
        (["--data.micro_batch_size", "3"], "not divisible by micro_batch_size"),
        (["--data.train", "OlmoNumpyData", "--data.train.paths", '["nowhere/*.npy"]'], "nowhere"),
        (["--data.train", "SyntheticData", "--data.train.seq_len", "4096"], "exceeds the model's max_position_emb"),
        (["--model.config_overrides", '{"hidden_sise": 32}'], "unknown key"),
        (["--model.init_from", "no/such/dir"], "not an HF model directory"),
        (["--data.train", '{"class_path": "SyntheticData", "init_args": {"vocab_size": 512}}'], "vocab"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    result = _cli("fit", "--trainer.max_steps", "2", "--trainer.default_root_dir", "run", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
    assert "Traceback" not in result.stderr


class _NaNAtStep3(RePoLightningModule):
    def _losses(self, batch):
        parts = super()._losses(batch)
        if self.global_step == 3:
            parts.total = parts.total * float("nan")
        return parts


def test_non_finite_loss_stops_and_keeps_the_last_good_state(tmp_path):
    pl.seed_everything(0, verbose=False)
    module = _NaNAtStep3(lr=3e-3, attn_implementation="sdpa")
    data = RePoDataModule(train=SyntheticData(seq_len=32, num_samples=256), global_batch_size=8, micro_batch_size=8)
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=10, logger=False, enable_progress_bar=False, use_distributed_sampler=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_last=True)],
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match="non-finite loss \\(nan\\) at step 3"):
        trainer.fit(module, data)
    assert module.stopped_on_nonfinite and trainer.global_step == 3
    assert all(torch.isfinite(p).all() for p in module.parameters())
    saved = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 3
    for name, value in module.state_dict().items():
        assert torch.equal(saved["state_dict"][name], value), name


def test_shipped_deepspeed_config_is_zero2_with_explicit_clipping():
    from repo_train.training.strategies import DEFAULT_ZERO2_CONFIG

    config = json.loads(DEFAULT_ZERO2_CONFIG.read_text())
    assert config["zero_optimization"]["stage"] == 2
    assert config["gradient_clipping"] == 1.0  # set explicitly, not left to DeepSpeed's default
