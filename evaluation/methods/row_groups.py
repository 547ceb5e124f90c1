"""Extra copies of a batch, decoded under other position policies as extra rows of the harness's own forward.

Attention Buckets (one copy per RoPE base) and PCD (the over-rotated copy)
feed the model, at every step, the tokens the harness feeds it, under other
RoPE encodings. Run one after another (`pcd.SideDecoder`), each copy reads all
the weights again; stacked as rows of one forward, the copies share those
reads, and a decoding step, which is bound by reading weights, costs little
more than the baseline's. The rows are independent in every layer (attention
never mixes rows), so the results are the sequential ones.

A method asks for copies with `Method.row_groups()` (one policy list per
copy). `RowGroups` then lays the decoding steps out as group 0 (the harness's
batch, under the installed policies) followed by each copy, B rows each, with
one KV cache for all; every copy has the harness's padding, mask and
positions. Each layer gets a `GroupedPolicy` for those forwards: RoPE layers
rotate all rows in one call, each row with its group's frequencies and
position scale.

The prefill runs group by group (B rows each, under the group's policies, into
its own cache; the caches are then stacked into the shared one, layer by
layer): a prefill is bound by arithmetic, not by reading weights, so stacking
would save no time there, and it would hold G times the activations (the
attention scores of the whole prompt among them) at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from repo_train.modeling import NopePolicy, PositionPolicy, RopePolicy, RotaryEncoding, Rotation
from repo_train.modeling.policy import linear_positions
from repo_train.modeling.scaling import ScaledRopePolicy
from repo_train.modeling.swapping import current_policies, swapped_policies


class GroupedPolicy(PositionPolicy):
    """Rows [g·B, (g+1)·B) of a forward get `policies[g]`; the same layer of every group.

    Groups of RoPE layers (`RopePolicy`, `ScaledRopePolicy`) rotate in one
    call with per-row frequencies and scales (the same products, element by
    element, as each group's own rotation); NoPE in every group rotates
    nothing. Other mixes are refused: no method stacks them.
    """

    name = "grouped"

    def __init__(self, policies: Sequence[PositionPolicy], rows: int):
        self.policies, self.rows = list(policies), rows
        kinds = {type(p) for p in self.policies}
        if kinds == {NopePolicy}:
            self.kind = "nope"
        elif kinds <= {RopePolicy, ScaledRopePolicy}:
            self.kind = "rope"
        else:
            names = sorted(p.name for p in self.policies)
            raise ValueError(f"row groups need RoPE or NoPE in every group of a layer, got {names}")
        self.needs_encoding = self.kind == "rope"
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._scaling: float | None = None

    def _row_tables(self, attention, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """`inv_freq [G·B, 1, 1, D/2]` and position scales `[G·B, 1, 1]` of every row, built once per device."""
        if device not in self._tables:
            default = None
            encodings, scales = [], []
            for policy in self.policies:
                encoding = policy.encoding
                if encoding is None:
                    default = default or RotaryEncoding.from_config(attention.config)
                    encoding = default
                encodings.append(encoding)
                scales.append(getattr(policy, "scale", 1.0))
            scalings = {e.attention_scaling for e in encodings}
            if len(scalings) != 1:
                raise ValueError(f"row groups need one attention scaling for all groups, got {sorted(scalings)}")
            self._scaling = scalings.pop()
            inv_freq = torch.stack([e.inv_freq.float() for e in encodings]).repeat_interleave(self.rows, dim=0)
            scale = torch.tensor(scales, dtype=torch.float32).repeat_interleave(self.rows)
            self._tables[device] = (inv_freq[:, None, None, :].to(device), scale[:, None, None].to(device))
        return self._tables[device]

    def rotation(self, attention, hidden_states, position_ids, shared, record):
        if self.kind == "nope":
            return None
        expected = self.rows * len(self.policies)
        if hidden_states.shape[0] != expected:
            raise ValueError(f"grouped policy expects {expected} rows, got {hidden_states.shape[0]}")
        inv_freq, scale = self._row_tables(attention, hidden_states.device)
        positions = linear_positions(position_ids) / scale
        return Rotation.from_positions(RotaryEncoding(inv_freq, self._scaling), positions)

    def describe(self) -> str:
        return f"{self.name}({', '.join(p.describe() for p in self.policies)})"


@dataclass
class RowGroups:
    """The copies a stack's methods asked for: who owns each, and the layout of the forward's rows."""

    owners: list[object]
    """The method of each extra group, in row order (group 0, the harness's rows, has none)."""
    group_policies: list[list[PositionPolicy]]
    """Per group (the harness's first), the policy of each layer."""
    layer_policies: list[GroupedPolicy]
    rows: int
    """B, the rows of the harness's batch (and of every group)."""

    @classmethod
    def of(cls, methods, model, rows: int) -> RowGroups | None:
        """The groups of a `MethodStack` for a batch of `rows` prompts, or None when no method asks for any."""
        owners, groups = [], []
        for method in methods.methods:
            for policies in method.row_groups():
                owners.append(method)
                groups.append(list(policies))
        if not groups:
            return None
        current = current_policies(model)
        for policies in groups:
            if len(policies) != len(current):
                raise ValueError(f"a row group has {len(policies)} policies for a model with {len(current)} layers")
        per_layer = [GroupedPolicy([own, *(g[i] for g in groups)], rows) for i, own in enumerate(current)]
        return cls(owners, [current, *groups], per_layer, rows)

    @property
    def copies(self) -> int:
        """G: the harness's group and the extra ones."""
        return 1 + len(self.owners)

    def expand(self, tensor: torch.Tensor) -> torch.Tensor:
        """`[B, ...]` -> `[G·B, ...]`: the same rows once per group."""
        return tensor.repeat(self.copies, *([1] * (tensor.dim() - 1)))

    def prefill(self, model, forward, cache) -> torch.Tensor:
        """Each group's prefill in turn, `forward(cache_of_group)` -> `[B, ...]` logits under the group's policies;
        their caches end up stacked, group after group, in `cache`. Returns the logits `[G·B, ...]` in row order."""
        parts, logits = [], []
        for policies in self.group_policies:
            part = DynamicCache(config=model.config.get_text_config(decoder=True))
            with swapped_policies(model, policies):
                logits.append(forward(part))
            parts.append(part)
        for layer in range(len(parts[0].layers)):
            layers = [part.layers[layer] for part in parts]
            keys, values = torch.cat([x.keys for x in layers]), torch.cat([x.values for x in layers])
            for x in layers:  # each group's copy goes as soon as it is stacked: one layer's extra memory at most
                x.keys = x.values = None
            cache.update(keys, values, layer)
            del keys, values
        return torch.cat(logits)

    @contextmanager
    def installed(self, model) -> Iterator[None]:
        """The grouped policies in every layer for the block (one forward), the previous ones back afterwards."""
        with swapped_policies(model, self.layer_policies):
            yield

    def split(self, logits: torch.Tensor) -> tuple[torch.Tensor, dict[int, list[torch.Tensor]]]:
        """`[G·B, V]` -> the harness's `[B, V]` and, per owning method (by id), its groups' `[B, V]` in order."""
        chunks = logits.split(self.rows, dim=0)
        extra: dict[int, list[torch.Tensor]] = {}
        for owner, chunk in zip(self.owners, chunks[1:]):
            extra.setdefault(id(owner), []).append(chunk)
        return chunks[0], extra
