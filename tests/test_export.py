"""`python -m repo_train export`: permissions, atomic replacement, and the run's tokenizer next to the weights.

The refusals (a file or unwritable `--out`, missing or incomplete checkpoints,
a tokenizer that is gone or of another model) are rows of
tests/test_bad_inputs_training.py; here is what a table row cannot show.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from evaluation.model_loading import byte_tokenizer
from repo_train.data import SyntheticData, SyntheticTextData, TextData
from repo_train.export import export_checkpoint
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.presets import tiny, tiny_byte


def _checkpoint(path: Path, **extra) -> Path:
    model = RePoOlmo2ForCausalLM(tiny(position_method="repo"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    torch.save({"state_dict": state, "model_config": model.config.to_dict(), **extra}, path)
    return path


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root.parent)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)], ids=["umask-022", "umask-077"]
)
def test_exported_files_get_the_umask_permissions(tmp_path, umask, file_mode, dir_mode):
    """Not 0600 from a temporary file: what `open`/`mkdir` would give under the caller's umask."""
    checkpoint = _checkpoint(tmp_path / "run.ckpt")
    old = os.umask(umask)
    try:
        export_checkpoint(checkpoint, tmp_path / "hf")
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "hf")
    assert {"hf/config.json", "hf/model.safetensors"} <= set(modes)
    assert modes == {name: (dir_mode if name == "hf" else file_mode) for name in modes}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run.ckpt"]  # no staging directory left


def test_a_failed_export_keeps_the_earlier_one_and_leaves_nothing(tmp_path, monkeypatch):
    checkpoint = _checkpoint(tmp_path / "run.ckpt")
    export_checkpoint(checkpoint, tmp_path / "hf")
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}

    def disk_full(self, directory, **kwargs):
        (Path(directory) / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(directory) / "model.safetensors"))

    monkeypatch.setattr(RePoOlmo2ForCausalLM, "save_pretrained", disk_full)
    with pytest.raises(
        ValueError, match=r"cannot write the export to .*hf \(No space left on device: .*model.safetensors"
    ):
        export_checkpoint(checkpoint, tmp_path / "hf")
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run.ckpt"]
    monkeypatch.undo()
    export_checkpoint(checkpoint, tmp_path / "new" / "deeper" / "hf")  # missing parents are created
    assert (tmp_path / "new" / "deeper" / "hf" / "model.safetensors").is_file()


def test_an_earlier_export_is_replaced_whole(tmp_path):
    export_checkpoint(_checkpoint(tmp_path / "a.ckpt"), tmp_path / "hf")
    (tmp_path / "hf" / "stale.txt").write_text("from the earlier export\n")
    model = export_checkpoint(_checkpoint(tmp_path / "b.ckpt"), tmp_path / "hf")
    assert not (tmp_path / "hf" / "stale.txt").exists()
    reloaded = RePoOlmo2ForCausalLM.from_pretrained(tmp_path / "hf")
    for name, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], value), name


def test_a_run_on_byte_text_exports_the_byte_tokenizer(tmp_path):
    """The tiny configs' data names `tokenizer: byte`: the export writes its files, so the evaluation reads the
    tokenizer the model was trained with; a model of the id corpus's 256 ids is refused it."""
    model = RePoOlmo2ForCausalLM(tiny_byte(position_method="repo"))
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    data = {"train": SyntheticTextData(seq_len=32).to_config()}
    checkpoint = tmp_path / "run.ckpt"
    torch.save(
        {"state_dict": state, "model_config": model.config.to_dict(), "datamodule_hyper_parameters": data}, checkpoint
    )
    assert export_checkpoint(checkpoint, tmp_path / "hf").tokenizer_source == ("byte", "data.train.tokenizer")
    manifest = json.loads((tmp_path / "hf" / "export.json").read_text())
    assert manifest["tokenizer"] == {"location": "byte", "from": "data.train.tokenizer"}
    written = AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    line = "kv: d=a b=f ? b=f"
    assert written(line)["input_ids"] == byte_tokenizer()(line)["input_ids"]
    assert (written.pad_token_id, written.eos_token_id, len(written)) == (0, 1, model.config.vocab_size)
    ids = _checkpoint(tmp_path / "ids.ckpt", datamodule_hyper_parameters={"train": SyntheticData().to_config()})
    with pytest.raises(ValueError, match="the tokenizer --tokenizer 'byte' has ids up to 257 but the model's vocab_"):
        export_checkpoint(ids, tmp_path / "ids", tokenizer="byte")
    assert export_checkpoint(ids, tmp_path / "ids").tokenizer_source is None  # the id corpus names none


@pytest.mark.slow  # three exports loading a tokenizer (~4 s on a shared core)
@pytest.mark.parametrize("saved_as", ["class_path", "old-source-dict"])
def test_the_tokenizer_comes_from_the_run_or_the_command_line(tmp_path, saved_as):
    byte = byte_tokenizer()
    tokenizer_dir = tmp_path / "tokenizer"
    byte.save_pretrained(tokenizer_dir)
    wide = tiny(position_method="repo", vocab_size=len(byte))
    model = RePoOlmo2ForCausalLM(wide)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    source = TextData(tokenizer=str(tokenizer_dir), paths=["a.txt"], seq_len=16)
    # what training saves now, and what a checkpoint written before data sources were classes holds
    old = {"source": "text", "tokenizer": str(tokenizer_dir), "paths": ["a.txt"], "seq_len": 16}
    data = {"train": source.to_config() if saved_as == "class_path" else old}
    checkpoint = tmp_path / "run.ckpt"
    torch.save({"state_dict": state, "model_config": wide.to_dict(), "datamodule_hyper_parameters": data}, checkpoint)
    exported = export_checkpoint(checkpoint, tmp_path / "hf")
    assert exported.tokenizer_source == (str(tokenizer_dir), "data.train.tokenizer")
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    assert export_checkpoint(checkpoint, tmp_path / "bare", with_tokenizer=False).tokenizer_source is None
    assert not (tmp_path / "bare" / "tokenizer.json").exists()
    # init_from's tokenizer when the data has none (a run on synthetic ids continuing an HF model)
    hparams = {"init_from": str(tokenizer_dir)}
    torch.save({"state_dict": state, "model_config": wide.to_dict(), "hyper_parameters": hparams}, checkpoint)
    assert export_checkpoint(checkpoint, tmp_path / "hf2").tokenizer_source == (str(tokenizer_dir), "model.init_from")


@pytest.mark.slow  # a real Lightning run on text, its export, and an evaluation of the export (~15 s)
def test_an_export_of_a_text_run_is_accepted_by_evaluation(tmp_path, one_thread, capsys, monkeypatch):
    """Issue 14: the export carries the run's tokenizer, so `python -m evaluation run --model EXPORT` runs on it."""
    from evaluation.cli import main as evaluation_main
    from repo_train.cli import main as repo_train_main

    byte_tokenizer().save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "docs.txt").write_text("\n".join(f"key {i} value {i * 7 % 13}" for i in range(200)) + "\n")
    train = TextData(tokenizer=str(tmp_path / "tokenizer"), paths=[str(tmp_path / "docs.txt")], seq_len=32)
    overrides = {"vocab_size": 258, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": None}
    argv = [
        "fit",
        "--trainer.max_steps",
        "2",
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.accelerator",
        "cpu",
        "--data.train",
        json.dumps(train.to_config()),
        "--data.global_batch_size",
        "4",
        "--data.micro_batch_size",
        "4",
        "--model.config_overrides",
        json.dumps(overrides),
        "--model.attn_implementation",
        "sdpa",
        "--checkpoint.every_n_train_steps",
        "2",
    ]
    monkeypatch.setattr(sys, "argv", ["python -m repo_train"])  # LightningCLI reads argv only from `args`
    assert repo_train_main(argv) == 0
    checkpoint = next((tmp_path / "run").rglob("last.ckpt"))
    assert repo_train_main(["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf")]) == 0
    assert "the tokenizer of data.train.tokenizer" in capsys.readouterr().out
    evaluation = [
        "run",
        "--model",
        str(tmp_path / "hf"),
        "--tasks",
        "kv",
        "--num_examples",
        "2",
        "--num_keys",
        "2",
        "--max_new_tokens",
        "2",
        "--no_progress",
        "--no_report",
        "--out",
        str(tmp_path / "eval"),
    ]
    assert evaluation_main(evaluation) == 0, capsys.readouterr().err
    assert (tmp_path / "eval" / "records.jsonl").read_text().count("\n") >= 1


@pytest.mark.parametrize(
    ("extra", "status", "note"),
    [
        ({"global_step": 300, "repo_train_max_steps": 300}, "finished", None),
        (
            {
                "global_step": 24,
                "repo_train_max_steps": 300,
                "repo_train_interrupted": {"signal": "SIGINT", "step": 24},
            },
            "interrupted",
            "the run was interrupted (SIGINT) at step 24 of 300",
        ),
        ({"global_step": 100, "repo_train_max_steps": 300}, "unfinished", "from step 100 of 300, before the run's end"),
        ({"global_step": 7}, "unknown", "does not record the run's total steps"),
    ],
)
def test_an_export_says_what_it_exported(tmp_path, capsys, extra, status, note):
    from types import SimpleNamespace

    from repo_train.export import run

    args = SimpleNamespace(
        checkpoint=str(_checkpoint(tmp_path / "a.ckpt", **extra)),
        out=str(tmp_path / "hf"),
        tokenizer=None,
        dtype="float32",
        no_tokenizer=True,
    )
    assert run(args) == 0
    training = json.loads((tmp_path / "hf" / "export.json").read_text())["training"]
    assert training["status"] == status and training["step"] == extra["global_step"]
    assert training["total_steps"] == extra.get("repo_train_max_steps")
    assert training["finished"] == {"finished": True, "unknown": None}.get(status, False)
    err = capsys.readouterr().err
    if note is None:
        assert "[export] note" not in err
    else:
        assert note in err and status in err and len(err.strip().splitlines()) == 1
