"""What a loaded model is, as hashes the records and cached files pin: `model_identity` (its name and config)
and `weights_fingerprint` (a sample of its weights).

A module of its own, below the methods and model loading: a method that keeps a file tied to one model
(`methods.fim_bias`) fingerprints the model it is given without depending on how models are loaded
(`evaluation.model_loading`, which imports repo_train's model classes and presets).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Values per tensor that `weights_fingerprint` hashes.
WEIGHT_SAMPLES = 1024


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A hash of every tensor's name, shape, dtype and 1,024 evenly strided values: cheap, device-independent."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // WEIGHT_SAMPLES)][:WEIGHT_SAMPLES].contiguous().cpu()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(sample.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def model_identity(model: PreTrainedModel) -> dict[str, str]:
    """Name/path of a model and a hash of its config: what the results say they were measured on."""
    config = model.config.to_dict()
    for volatile in ("transformers_version", "_name_or_path", "dtype", "torch_dtype", "_attn_implementation_autoset"):
        config.pop(volatile, None)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    name = str(getattr(model, "name_or_path", "") or model.config.name_or_path or type(model).__name__)
    return {"name": name, "class": type(model).__name__, "config_sha256": digest}
