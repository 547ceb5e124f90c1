"""Regional `torch.compile`: each decoder layer compiled in place (`model.compile: true`).

As torchtitan and OLMo-core do, the layer, not the whole model, is the unit: everything inside a layer (the
attention with REPO's predictor and each position policy's rotation, the MLP, the norms) becomes one graph,
layers of one structure share it, and the embeddings, the LM head and the loss stay eager. `nn.Module.compile`
compiles the module's call in place, so the state dict keeps its keys (no `_orig_mod.` prefix): checkpoints,
resume and export see the same model.

The layers are compiled after activation checkpointing is applied (torchtitan's order): the checkpoint, of the
layer or of its attention or MLP, is traced into the layer's graph, and the compiler's partitioner recomputes
that region in the backward graph. The other order (a compiled forward inside an eager checkpoint) would replay
the compiled forward as an opaque call and leave the compiler no say in what is kept.
"""

from __future__ import annotations

import torch
from torch import nn

from repo_train.training.activation_checkpointing import decoder_layers

#: The torch.compile backend. Not a user option: tests set "eager" / "aot_eager" to check the wiring fast.
BACKEND = "inductor"
#: Graphs kept per compiled function before dynamo gives up and runs it eagerly (torch's default is 8). Layers
#: differ in kind (RoPE / NoPE / REPO, checkpointed or not: one graph each), REPO's curriculum gives up to three
#: per kind (its first p, any p, p = 0), and validation (no grad, inference mode) and a new sequence length add
#: theirs: a 16-layer REPO run with a curriculum and validation needs more than 8.
RECOMPILE_LIMIT = 64


def compile_decoder_layers(model: nn.Module) -> list[nn.Module]:
    """Compile each decoder layer of `model` in place with `BACKEND`; returns the layers."""
    layers = list(decoder_layers(model))
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    for layer in layers:
        layer.compile(backend=BACKEND)
    return layers
