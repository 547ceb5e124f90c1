"""FSDP2 (`torch.distributed.fsdp.fully_shard`) under Lightning's `ModelParallelStrategy`.

`ModelParallelStrategy` leaves parallelization to the module's
`configure_model`: `shard_model` shards each decoder layer, then the decoder
(embeddings, final norm), the head and the root, over the strategy's
data-parallel mesh. The
strategy does no mixed precision of its own either; the choice here:

- `precision: bf16-mixed` (what the training configs use): fp32 weights and
  AdamW state (sharded), a `MixedPrecisionPolicy` that all-gathers the weights
  as bf16 for compute and reduce-scatters gradients in fp32; Lightning's
  autocast stays on around the step (the loss and softmax run in fp32 as under
  DDP/DeepSpeed).
- `precision: 32-true`: no policy, everything fp32 (the CPU tests).
- `bf16-true` / `16-true` are refused: Lightning casts the sharded weights
  themselves to 16 bits, leaving AdamW without fp32 master weights.

Gradient norms: FSDP2's gradients are DTensor shards; `clip_grad_norm`
returns the norm over all ranks as a plain tensor (what `train/grad_norm`
logs) and clips with it, the same arithmetic as `torch.nn.utils.clip_grad_norm_`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import torch
from pytorch_lightning.strategies import ModelParallelStrategy
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

# Lightning rewrites `last.ckpt` (a directory here) at every checkpoint step on purpose; DCP warns each time.
warnings.filterwarnings("ignore", message=r"Detected an existing checkpoint in .*overwriting since self.overwrite=True")

#: Trainer precisions `shard_model` accepts, and the compute dtype each gives.
PARAM_DTYPES = {"32-true": None, "32": None, "bf16-mixed": torch.bfloat16}


def is_model_parallel(strategy) -> bool:
    """Whether the trainer's strategy is Lightning's `ModelParallelStrategy` (FSDP2 applied by the module)."""
    return isinstance(strategy, ModelParallelStrategy)


def shard_model(model: torch.nn.Module, mesh, precision: str) -> torch.nn.Module:
    """Shard `model` (an HF causal LM with `model.model.layers`) with FSDP2 over the 1-D `mesh`, in place.

    Each decoder layer is its own FSDP unit (its weights are gathered only while it runs, and freed after),
    and so are the decoder's own weights (embeddings, final norm) and the head. Activation checkpointing must already be on (it wraps the layers' forward,
    which FSDP's hooks then surround). Tensor parallelism is not used: the mesh must be 1-D.
    """
    if str(precision) not in PARAM_DTYPES:
        raise ValueError(
            f"FSDP2 (ModelParallelStrategy) with trainer.precision={precision!r} is not supported: use bf16-mixed "
            "(fp32 weights and optimizer state, bf16 compute) or 32-true; 16-bit 'true' precisions would cast the "
            "sharded fp32 weights AdamW updates"
        )
    if mesh.ndim != 1:
        raise ValueError(f"FSDP2 here shards over one data-parallel mesh dimension, got a {mesh.ndim}-D mesh")
    param_dtype = PARAM_DTYPES[str(precision)]
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    # The decoder (embeddings, final norm) and the head are units of their own: a chunked loss
    # (`model.loss_chunk_tokens`) calls them directly, not through the root's forward, whose hooks
    # would otherwise be the only ones that gather their weights.
    fully_shard(model.model, mesh=mesh, mp_policy=policy)
    if not getattr(model.config, "tie_word_embeddings", False):
        fully_shard(model.lm_head, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _plain(norm: torch.Tensor) -> torch.Tensor:
    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor | None:
    """The total L2 norm of the gradients (all ranks' shards), a plain tensor; clipped to `max_norm` if given.

    None when no parameter has a gradient. For plain tensors this is exactly `clip_grad_norm_`.
    """
    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    norm = _plain(torch.nn.utils.get_total_norm(grads))
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)
    return norm
