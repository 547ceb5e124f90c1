"""AdamW with OLMo's weight-decay groups, and the linear-decay schedule of the REPO runs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def parameter_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """Two groups: everything decayed except (by default) input embeddings, as OLMo's
    `decay_embeddings: false` with `decay_norm_and_bias: true`."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        (no_decay if (id(param) in embeddings and not decay_embeddings) else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_adamw(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    decay_embeddings: bool = False,
    fused: bool = False,
) -> torch.optim.AdamW:
    """torch's AdamW (decoupled decay); `foreach` off keeps CPU runs bit-reproducible across resumes.

    `fused`: torch's fused kernel (CPU and CUDA), one kernel for all tensors of a device instead of a loop.
    Left off it stays torch's default (None: foreach on CUDA), as before the option existed.
    """
    if lr <= 0:
        raise ValueError(f"learning rate must be > 0, got {lr}")
    return torch.optim.AdamW(
        parameter_groups(model, weight_decay, decay_embeddings),
        lr=lr,
        betas=tuple(betas),
        eps=eps,
        fused=True if fused else None,
    )


def set_fused(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """Make a restored Adam/AdamW use (or not) the fused kernel, whatever the checkpoint's param groups said.

    `load_state_dict` takes `fused` from the saved groups, so a resume that turns
    `fused_adamw` on or off would otherwise silently keep the old setting. Each
    `step` counter moves where that kernel keeps it (the parameter's device when
    fused, the CPU otherwise). A wrapper (DeepSpeed's ZeRO optimizer) is looked
    through to the torch optimizer it steps.
    """
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(inner, torch.optim.Adam):
        return
    changed = False
    for group in inner.param_groups:
        if bool(group.get("fused")) == fused:
            continue
        changed = True
        group["fused"] = True if fused else None
        for param in group["params"]:
            state = inner.state.get(param)
            if state and torch.is_tensor(state.get("step")):
                state["step"] = state["step"].to(param.device if fused else "cpu")
    if changed:
        inner._step_supports_amp_scaling = fused  # what AdamW.__init__ sets for a fused optimizer


def linear_decay(total_steps: int, warmup_steps: int = 0) -> Callable[[int], float]:
    """LR multiplier: optional linear warm-up, then linear decay to 0 at `total_steps`."""
    if total_steps < 1:
        raise ValueError(f"the schedule needs total_steps >= 1, got {total_steps}")

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        remaining = total_steps - step
        return max(0.0, remaining / max(1, total_steps - warmup_steps))

    return factor
