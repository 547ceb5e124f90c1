"""`python -m repo_train export`: a training checkpoint -> an HF model directory.

Reads a Lightning `.ckpt` file or a DeepSpeed ZeRO checkpoint directory (its
partitioned shards are merged to fp32 by DeepSpeed's own zero_to_fp32 code),
rebuilds `RePoOlmo2ForCausalLM` from the model config stored in the
checkpoint, and writes `save_pretrained` output that
`AutoModelForCausalLM.from_pretrained` loads after `import repo_train`. The
export is also how a ZeRO run moves to another number of processes.

Checkpoints are unpickled with `torch.load(weights_only=True)` (also inside
DeepSpeed's shard merging, via `TORCH_FORCE_WEIGHTS_ONLY_LOAD`): a crafted
`.ckpt` cannot run code. Besides tensors and plain containers, only the
globals in `SAFE_GLOBALS` are allowed; anything else, and files that are not
checkpoints at all, end in one line naming the problem.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="Lightning .ckpt file or DeepSpeed checkpoint directory")
    parser.add_argument("--out", required=True, help="output HF directory")
    parser.add_argument("--tokenizer", default=None, help="directory whose tokenizer files are copied alongside")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


#: Globals (besides tensors and plain containers, which weights_only allows anyway) that repo_train's
#: checkpoints hold: a plain Lightning .ckpt needs none; the optimizer shards of a DeepSpeed ZeRO-2
#: checkpoint hold these three plain-data classes (found by saving real checkpoints with
#: tests/training/tiny_run.py). Module paths, imported only for a ZeRO checkpoint.
SAFE_GLOBALS = {
    "zero": (
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",  # static loss scale (1.0 in fp32/bf16): numbers
        "deepspeed.runtime.zero.config.ZeroStageEnum",  # enum of the ZeRO stage
        "deepspeed.utils.tensor_fragment.fragment_address",  # dataclass (numel, start)
    )
}
ACCEPTED = "only Lightning checkpoints written by repo_train (python -m repo_train fit) are accepted"


def _import_global(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


@contextmanager
def _weights_only(kind: str) -> Iterator[None]:
    """Every torch.load inside (also in library code asking for weights_only=False) is weights_only."""
    previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.serialization.safe_globals([_import_global(g) for g in SAFE_GLOBALS.get(kind, ())]):
            yield
    finally:
        if previous is None:
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous


def _refusal(path: Path, err: Exception) -> ValueError:
    """One line for a checkpoint torch could not (or would not) unpickle."""
    text = str(err)
    refused = re.findall(r"GLOBAL ([\w.]+)", text)
    if isinstance(err, pickle.UnpicklingError) and refused:
        return ValueError(f"{path}: refused to unpickle {refused[0]}; {ACCEPTED}")
    detail = text.split("WeightsUnpickler error:", 1)[-1].strip().splitlines()
    detail = detail[0][:200] if detail else ("empty file" if isinstance(err, EOFError) else type(err).__name__)
    return ValueError(
        f"{path}: not a readable PyTorch checkpoint (damaged, truncated or another format: {detail}); {ACCEPTED}"
    )


def _load_lightning_checkpoint(path: Path) -> dict:
    if path.is_dir():
        from pytorch_lightning.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        with tempfile.TemporaryDirectory() as tmp:
            merged = Path(tmp) / "merged.ckpt"
            try:
                with _weights_only("zero"):  # DeepSpeed's shard reader hard-codes weights_only=False
                    convert_zero_checkpoint_to_fp32_state_dict(str(path), str(merged))
            except Exception as err:  # any failure to read the user's files is one line
                if isinstance(err, pickle.UnpicklingError):
                    raise _refusal(path, err) from err
                raise ValueError(
                    f"{path}: not a readable DeepSpeed ZeRO checkpoint directory ({type(err).__name__}: "
                    f"{(str(err).strip().splitlines() or [''])[0][:200]}); {ACCEPTED}"
                ) from err
            return _load_file(merged, path)
    return _load_file(path, path)


def _load_file(file: Path, shown: Path) -> dict:
    try:
        with _weights_only("lightning"):
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # random bytes, a truncated zip, a refused global: one line each
        raise _refusal(shown, err) from err
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict):
        raise ValueError(f"{shown}: holds no Lightning state_dict; {ACCEPTED}")  # noqa: TRY004 (a user error)
    return state


def export_checkpoint(checkpoint: str | Path, out: str | Path, tokenizer: str | Path | None = None, dtype="float32"):
    """Write the HF directory; returns the model that was saved."""
    checkpoint, out = Path(checkpoint), Path(out)
    if not checkpoint.exists():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    state = _load_lightning_checkpoint(checkpoint)
    if "model_config" not in state:
        raise ValueError(f"{checkpoint} has no 'model_config': it was not written by repo_train's training module")
    config = RePoOlmo2Config.from_dict(state["model_config"])
    model = RePoOlmo2ForCausalLM(config)
    weights = {k.removeprefix("model."): v for k, v in state["state_dict"].items() if k.startswith("model.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ValueError(f"checkpoint weights do not match the model: missing {missing}, unexpected {unexpected}")
    model = model.to(getattr(torch, dtype))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        copied = [name for name in TOKENIZER_FILES if (Path(tokenizer) / name).is_file()]
        if not copied:
            raise FileNotFoundError(f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {tokenizer}")
        for name in copied:
            shutil.copy2(Path(tokenizer) / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # the directory appears complete or not at all
    return model


def run(args: argparse.Namespace) -> int:
    export_checkpoint(args.checkpoint, args.out, args.tokenizer, args.dtype)
    print(f"[export] wrote {args.out}")
    return 0
