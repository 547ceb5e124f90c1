"""`python -m workflows device-kit` packs wheels and a model into transfer-sized folders; scripts/device_session.sh
joins and installs them on the GPU node. Both sides run here on tiny hand-made wheels (no network, no GPU)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from workflow_commands import parse_args

from workflows.device_kit import packing as kit

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "scripts" / "device_session.sh"


def make_wheel(folder: Path, name: str, payload: bytes = b"") -> Path:
    """A minimal pure-Python wheel pip installs: one module (with `payload` as a data file) and its dist-info."""
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"VALUE = 7\n",
        f"{name}/payload.bin": payload,
        f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{name}-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{name}-0.1.dist-info/RECORD"] = "".join(
        f"{path},,\n" for path in [*files, f"{name}-0.1.dist-info/RECORD"]
    ).encode()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def sized(folder: Path, name: str, size: int) -> Path:
    path = folder / name
    path.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    return path


def test_pack_fills_calls_in_order_and_cuts_the_model_across_calls(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    wheels = [(f"w{i}==1", sized(src, f"w{i}-1-py3-none-any.whl", size)) for i, size in enumerate((40, 50, 30))]
    model = sized(src, "model-1-py3-none-any.whl", 250)
    original = model.read_bytes()
    manifest = kit.pack(tmp_path / "kit", wheels, ("model==1", model), 100, "3.12")

    out = tmp_path / "kit"
    assert [w["file"] for w in manifest["wheels"]] == [
        "call-1/wheels/w0-1-py3-none-any.whl",  # 40
        "call-1/wheels/w1-1-py3-none-any.whl",  # 90
        "call-2/wheels/w2-1-py3-none-any.whl",  # 50 would pass 100: the next call
    ]
    parts = manifest["model"]["parts"]
    assert [(p["file"].split("/")[0], p["bytes"]) for p in parts] == [("call-2", 70), ("call-3", 100), ("call-4", 80)]
    assert b"".join((out / p["file"]).read_bytes() for p in parts) == original
    assert manifest["model"]["sha256"] == hashlib.sha256(original).hexdigest()
    for entry in [*manifest["wheels"], *parts]:
        assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert [c["carry"] for c in manifest["calls"]] == [f"kit/call-{n}" for n in (1, 2, 3, 4)]
    for call in ("call-1", "call-2", "call-3", "call-4"):  # each call's payload within budget, manifest in each
        payload = sum(f.stat().st_size for f in (out / call).rglob("*") if f.is_file() and f.name != "manifest.json")
        assert payload <= 100
        assert json.loads((out / call / "manifest.json").read_text()) == manifest
    plan = (out / "plan.md").read_text()
    assert plan.count("device_session.sh stage") == 3 and '4. carry ["kit/call-4"]' in plan
    assert plan.splitlines()[-3].endswith("`bash scripts/device_session.sh all`")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".kit")]  # no staging folder left


def test_pack_refuses_a_wheel_larger_than_a_call_and_keeps_the_earlier_kit(tmp_path):
    first = kit.pack(tmp_path / "kit", [("a==1", sized(tmp_path, "a-1-py3-none-any.whl", 10))], None, 100, "3.12")
    with pytest.raises(RuntimeError, match=r"big-1-py3-none-any.whl \(0.0 MiB\) is larger than a call's"):
        kit.pack(tmp_path / "kit", [("big==1", sized(tmp_path, "big-1-py3-none-any.whl", 101))], None, 100, "3.12")
    assert json.loads((tmp_path / "kit" / "manifest.json").read_text()) == first


def session(step: str, checkout: Path, kit: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "DEVICE_KIT": str(kit), "OUT": str(checkout / "out")}
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "device_session.sh"), step],
        capture_output=True, text=True, env=env, cwd=checkout, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture
def checkout(tmp_path) -> Path:
    """The session script in a folder of its own, as it lands in the device's copy of the checkout."""
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    (tmp_path / "repo" / "scripts" / "device_session.sh").write_bytes(SESSION.read_bytes())
    return tmp_path / "repo"


def test_the_device_side_checks_joins_and_installs_the_kit(tmp_path, checkout):
    src = tmp_path / "src"
    src.mkdir()
    wheel = make_wheel(src, "tinykit")
    model = make_wheel(src, "tinymodel", payload=os.urandom(3000))
    kit_dir = checkout / ".device-kit"
    data = src / "nq.jsonl.gz"
    data.write_bytes(b"questions")
    manifest = kit.pack(kit_dir, [("tinykit==0.1", wheel)], ("tinymodel==0.1", model), 2000, "3.12", data)
    assert len(manifest["model"]["parts"]) >= 2  # the model travels in parts
    assert manifest["data"]["file"] == "call-1/data/nq.jsonl.gz"

    landed = session("stage", checkout, kit_dir)
    assert landed.returncode == 0 and "call-1" in landed.stdout

    done = session("setup", checkout, kit_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 wheels and tinymodel-0.1-py3-none-any.whl: sha256 ok" in done.stdout
    site = kit_dir / "site"
    check = [sys.executable, "-c", "import tinykit, tinymodel; print(tinykit.VALUE, len(tinymodel.__file__) > 0)"]
    imported = subprocess.run(check, capture_output=True, text=True, env={"PYTHONPATH": str(site)}, check=False)
    assert imported.stdout.split() == ["7", "True"], imported.stderr
    assert "installed already" in session("setup", checkout, kit_dir).stdout  # a rerun keeps the install


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda part: part.write_bytes(part.read_bytes()[:-1] + b"x"), "sha256 differs for ['call-"),
        (lambda part: part.unlink(), "kit files not here yet: ['call-"),
    ],
)
def test_the_device_side_refuses_a_damaged_or_incomplete_kit(tmp_path, checkout, damage, message):
    src = tmp_path / "src"
    src.mkdir()
    model = make_wheel(src, "tinymodel", payload=os.urandom(3000))
    kit_dir = checkout / ".device-kit"
    manifest = kit.pack(
        kit_dir, [("tinykit==0.1", make_wheel(src, "tinykit"))], ("tinymodel==0.1", model), 2000, "3.12"
    )
    damage(kit_dir / manifest["model"]["parts"][-1]["file"])
    result = session("setup", checkout, kit_dir)
    assert result.returncode == 2 and message in result.stdout + result.stderr
    assert not (kit_dir / "site").exists()


def test_the_device_side_names_a_missing_kit_and_a_wrong_step(checkout):
    missing = session("setup", checkout, checkout / ".device-kit")
    assert missing.returncode == 2 and "no kit here: carry its call folders (plan.md)" in missing.stdout
    wrong = session("nope", checkout, checkout / ".device-kit")
    assert wrong.returncode == 2 and "usage: bash scripts/device_session.sh" in wrong.stderr


def test_without_a_transfer_cap_one_folder_holds_the_whole_kit(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    wheels = [(f"w{i}==1", sized(src, f"w{i}-1-py3-none-any.whl", 40)) for i in range(3)]
    manifest = kit.pack(tmp_path / "kit", wheels, ("model==1", sized(src, "model-1-py3-none-any.whl", 250)),
                        math.inf, "3.12")  # fmt: skip
    assert [c["carry"] for c in manifest["calls"]] == ["kit/call-1"]
    assert [p["bytes"] for p in manifest["model"]["parts"]] == [250]


def test_the_options_name_no_transfer_cap_and_no_data_by_default(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args("device-kit", ["--out", str(tmp_path / "kit"), "--print_config"])
    assert stop.value.code == 0
    printed = capsys.readouterr().out
    assert "call_mib: null" in printed and "data: null" in printed
