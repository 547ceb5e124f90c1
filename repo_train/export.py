"""`python -m repo_train export`: a training checkpoint -> an HF model directory.

Reads a Lightning `.ckpt` file or a DeepSpeed ZeRO checkpoint directory (its
partitioned shards are merged to fp32 by DeepSpeed's own zero_to_fp32 code),
rebuilds `RePoOlmo2ForCausalLM` from the model config stored in the
checkpoint, and writes `save_pretrained` output that
`AutoModelForCausalLM.from_pretrained` loads after `import repo_train`. The
export is also how a ZeRO run moves to another number of processes.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from repo_train.modeling import RePoOlmo2Config, RePoOlmo2ForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="Lightning .ckpt file or DeepSpeed checkpoint directory")
    parser.add_argument("--out", required=True, help="output HF directory")
    parser.add_argument("--tokenizer", default=None, help="directory whose tokenizer files are copied alongside")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def _load_lightning_checkpoint(path: Path) -> dict:
    if path.is_dir():
        from pytorch_lightning.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        with tempfile.TemporaryDirectory() as tmp:
            merged = Path(tmp) / "merged.ckpt"
            convert_zero_checkpoint_to_fp32_state_dict(str(path), str(merged))
            return torch.load(merged, map_location="cpu", weights_only=False)
    return torch.load(path, map_location="cpu", weights_only=False)


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
