"""Loading the model under evaluation: a local HF directory, or the built-in tiny default.

`load_model` accepts any RoPE causal LM directory transformers can read
offline (OLMo-2, Llama, Qwen2, Mistral) and this project's `repo_olmo2`
checkpoints (registered by `import repo_train`). Published RePo directories
say `model_type: olmo2` with a `pe_config`; they are routed to
`RePoOlmo2ForCausalLM`, since the plain Auto class would drop the REPO weights.
Every load is strict: a checkpoint whose weights miss, add or mis-shape any
parameter of the model its config describes is refused in one line naming
the first keys (transformers would put random weights there and evaluate
them).

`tiny_default` builds, with no files at all, a random 4-layer OLMo-2 and a
byte-level tokenizer, so the whole pipeline runs end to end (its answers are
noise).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

import repo_train  # noqa: F401  (registers repo_olmo2 with the Auto classes)
from evaluation.devices import DEVICES
from repo_common.cli_errors import first_line
from repo_common.model_directory import check_model_files
from repo_train.byte_tokenizer import byte_tokenizer
from repo_train.modeling import RePoOlmo2ForCausalLM
from repo_train.modeling.olmo2 import load_checked
from repo_train.modeling.presets import tiny
from repo_train.modeling.size_estimate import check_fits_in_memory

TINY_DEFAULT_NAME = "tiny-default"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def tiny_default(seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The built-in default: a random `presets.tiny` OLMo-2 sized to the byte tokenizer (same weights per seed)."""
    tokenizer = byte_tokenizer()
    config = tiny(vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RePoOlmo2ForCausalLM(config).eval()
    model.name_or_path = f"{TINY_DEFAULT_NAME}(seed={seed})"
    _prepare(model, tokenizer)
    return model, tokenizer


def _prepare(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Left padding, a pad token (eos when missing) and a generation config that agrees with them."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token; set one of them before evaluating")
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config.eos_token_id is None and tokenizer.eos_token_id is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id


def _unreadable_weights(path: Path, err: Exception) -> str:
    """One line naming the unreadable safetensors file of `path` (the first that fails to open) and the fix."""
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(weights, framework="pt"):  # reads and checks the header (sizes against the file)
                pass
        except (SafetensorError, OSError) as problem:
            err = problem
            break
    else:
        weights = path
    detail = " ".join(str(err).split())
    return (
        f"{weights} is not a readable safetensors file ({detail}): it is truncated or corrupt; copy it again "
        "from where the model came from, or save the model again with save_pretrained"
    )


def check_attention_kernel(attn_implementation: str) -> None:
    """flash_attention_2 needs CUDA and the flash-attn package: refused in one line where either is missing."""
    if attn_implementation != "flash_attention_2":
        return
    if not torch.cuda.is_available():
        raise ValueError("--attn_implementation flash_attention_2 needs a CUDA GPU; use sdpa on the CPU")
    if importlib.util.find_spec("flash_attn") is None:
        raise ValueError(
            "--attn_implementation flash_attention_2 needs the flash-attn package (pip install flash-attn)"
        )


def load_model(
    path: str | Path, dtype: str = "float32", attn_implementation: str = "sdpa"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (eval mode) and tokenizer (left padding, pad token set) from a local HF directory, offline."""
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(_DTYPES)}")
    path = Path(path)
    raw_config = check_model_files("model directory", path)
    check_fits_in_memory(raw_config, _DTYPES[dtype].itemsize, f"{path / 'config.json'}")
    check_attention_kernel(attn_implementation)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as err:  # the tokenizers library raises plain Exceptions for a malformed tokenizer.json
        detail = first_line(err)
        raise ValueError(
            f"{path}: its tokenizer files do not load ({detail}); save the model's tokenizer there again with "
            "tokenizer.save_pretrained(DIR)"
        ) from err
    vocab = raw_config.get("vocab_size")
    if isinstance(vocab, int) and tokenizer.vocab_size > vocab:  # added tokens are checked where prompts use them
        raise ValueError(
            f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary only {vocab} (ids "
            "past it have no embedding); the tokenizer belongs to another model: save this model's own tokenizer there"
        )
    kwargs = dict(local_files_only=True, dtype=_DTYPES[dtype], attn_implementation=attn_implementation)
    model_type = raw_config.get("model_type")
    try:
        if model_type == "repo_olmo2" or (model_type == "olmo2" and raw_config.get("pe_config") is not None):
            model = RePoOlmo2ForCausalLM.from_pretrained(path, **kwargs)  # strict itself; also the published layout
        else:  # a missing, unexpected or mis-shaped weight would be evaluated as random numbers: refused
            model = load_checked(AutoModelForCausalLM.from_pretrained, path, **kwargs)
    except SafetensorError as err:
        raise ValueError(_unreadable_weights(path, err)) from err
    model.eval()
    _prepare(model, tokenizer)
    return model, tokenizer


def resolve_dtype(dtype: str, device: str) -> str:
    """`auto` = bfloat16 on a GPU (the precision the papers' models run in, half the memory of float32)
    and float32 on the CPU (where bf16 kernels are slow and the tests compare against fp32 references)."""
    if dtype != "auto":
        return dtype
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "bfloat16" if on_gpu else "float32"


def place_model(model: PreTrainedModel, device: str = "auto") -> PreTrainedModel:
    """Move the model to `device`: "cuda" = this process's GPU (LOCAL_RANK under torchrun), "auto" = cuda if any.

    Inputs follow `model.device` everywhere in the harness, so this is the only
    placement a run needs.
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {DEVICES}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for, but torch sees no CUDA GPU; use --device cpu (or auto)")
        return model.to(torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))))
    return model.to("cpu")


#: Weight files `weights_identity` pins, by suffix.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
#: Bytes read at each end of a weight file, and the size and count of the blocks read evenly in between.
_END_BYTES, _BLOCK_BYTES, _BLOCKS = 2**20, 2**16, 16


def file_identity(path: str | os.PathLike) -> dict[str, object]:
    """{"size", "sha256"} of a file read in part: its first and last MiB and 16 evenly spaced 64 KiB blocks.

    A few MiB whatever the file's size, so pinning a run to a 10 GB checkpoint costs milliseconds; replaced
    weights change the header or the tensors at both ends (a fine-tune changes every tensor). The size is
    hashed too. The modification time is not compared: a copy or `touch` changes it, not the weights.
    """
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as handle:
        offsets = [0, max(0, size - _END_BYTES)]
        offsets += [(size * (i + 1)) // (_BLOCKS + 1) for i in range(_BLOCKS)] if size > 2 * _END_BYTES else []
        for index, offset in enumerate(offsets):
            handle.seek(offset)
            digest.update(handle.read(_END_BYTES if index < 2 else _BLOCK_BYTES))
    return {"size": size, "sha256": digest.hexdigest()[:32]}


def weights_identity(directory: str | os.PathLike) -> dict[str, dict[str, object]]:
    """`file_identity` of every weight file in a model directory (`WEIGHT_SUFFIXES`), by file name."""
    directory = Path(directory)
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    return {p.name: file_identity(p) for p in files}
