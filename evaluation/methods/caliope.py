"""CALIOPE (Zehle & Aßenmacher): move each retrieved chunk to a calibrated position, Φ(t) = t + c(m(t)).

The prompt is split into chunks at the start of each retrieved document:
m(t) = the number of documents that start at or before token t, so tokens
before the first document have m = 0, document i (from 1) and the separator
after it have m = i, and the tail after the last document (the question) has
m = d, i.e. it keeps the last chunk's offset c(d). c is a cumulative gap:
c(0) = c(1) = 0 and c(m) - c(m-1) is the gap opened before chunk m.

    identity   c(m) = 0
    moses      c(m) = 0 for m <= floor(d/2), else Δ_gap                            (Δ_gap = 10,000)
    hourglass  c(m) = Σ_{k=1}^{m-1} [Δ_min + 4 u_k (1 - u_k)(Δ_max - Δ_min)],   u_k = k/(d-1)
                                                                               (Δ_min = 5, Δ_max = 1,000)
    decay      c(m) = Σ_{k=1}^{m-1} Δ_0 λ^k                                        (Δ_0 = 1,000, λ = 0.95)

Only the prompt positions change (zero extra forwards); generated tokens go on
from max Φ + 1 (the harness does that). Gaps are never negative, so Φ is
strictly increasing; parameters that would make a gap negative are refused.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from evaluation.methods.base import GenerationBatch, Method, register_method
from repo_train.modeling.attention import UnsupportedModelError, layer_policies
from repo_train.modeling.scaling import refuse_without_rope

#: Each calibrator's parameters and the paper's defaults.
CALIBRATOR_DEFAULTS: dict[str, dict[str, float]] = {
    "identity": {},
    "moses": {"delta_gap": 10_000.0},
    "hourglass": {"delta_min": 5.0, "delta_max": 1_000.0},
    "decay": {"delta_0": 1_000.0, "lam": 0.95},
}
BOUNDARY_MODES = ("spans", "markers")
DEFAULT_MARKERS = "Document ["


def _check_params(calibrator: str, params: dict[str, float]) -> dict[str, float]:
    """The calibrator's full parameter set (defaults filled in); unknown or gap-negating values raise."""
    if calibrator not in CALIBRATOR_DEFAULTS:
        raise ValueError(f"caliope: unknown calibrator {calibrator!r}; choose one of {sorted(CALIBRATOR_DEFAULTS)}")
    defaults = CALIBRATOR_DEFAULTS[calibrator]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(
            f"caliope: {unknown} not parameter(s) of calibrator {calibrator!r}; its parameters are {sorted(defaults)}"
        )
    resolved = {**defaults, **{k: float(v) for k, v in params.items()}}
    for key, value in resolved.items():
        if not math.isfinite(value):
            raise ValueError(f"caliope: {key} must be a finite number, got {value!r}")
    # Every gap is built from these values with non-negative weights: each must be >= 0 for Φ to keep increasing.
    for key in ("delta_gap", "delta_min", "delta_max", "delta_0", "lam"):
        if key in resolved and resolved[key] < 0:
            raise ValueError(
                f"caliope: {key}={resolved[key]:g} < 0 would make a gap negative, so positions would not increase "
                f"strictly; use {key} >= 0"
            )
    # The hourglass widens from delta_min at the ends to delta_max in the middle; the other way round inverts it.
    if resolved.get("delta_min", 0.0) > resolved.get("delta_max", math.inf):
        raise ValueError(
            f"caliope: delta_min={resolved['delta_min']:g} > delta_max={resolved['delta_max']:g} would invert the "
            "hourglass (wider gaps at the ends than in the middle); use delta_min <= delta_max"
        )
    return resolved


def gap_schedule(calibrator: str, d: int, **params: float) -> list[float]:
    """[c(0), c(1), ..., c(d)]: the offset of each chunk, for d retrieved chunks (see the module docstring)."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
        raise ValueError(f"caliope: the number of chunks d must be an int >= 0, got {d!r}")
    p = _check_params(calibrator, params)
    if calibrator == "identity":
        return [0.0] * (d + 1)
    if calibrator == "moses":
        return [0.0 if m <= d // 2 else p["delta_gap"] for m in range(d + 1)]
    if calibrator == "hourglass":
        gaps = []
        for k in range(1, d):
            u = k / (d - 1)
            gaps.append(p["delta_min"] + 4.0 * u * (1.0 - u) * (p["delta_max"] - p["delta_min"]))
    else:  # decay
        gaps = [p["delta_0"] * p["lam"] ** k for k in range(1, d)]
    schedule = [0.0, 0.0][: d + 1]  # c(0) = c(1) = 0: empty sums
    for gap in gaps:  # c(m) = c(m-1) + gap_{m-1}
        schedule.append(schedule[-1] + gap)
    return schedule


def remap_positions(positions: torch.Tensor, chunk_starts: list[int], schedule: list[float]) -> torch.Tensor:
    """Φ for one row: `positions [S]` + c(m(t)), m(t) = number of chunk starts <= t (float64)."""
    index = torch.arange(positions.shape[0], device=positions.device)
    starts = torch.tensor(sorted(chunk_starts), dtype=torch.long, device=positions.device)
    m = torch.searchsorted(starts, index, right=True)
    offsets = torch.tensor(schedule, dtype=torch.float64, device=positions.device)[m]
    return positions.double() + offsets


def _char_to_token(offsets: list[tuple[int, int]], char: int) -> int:
    """Index of the first token whose characters end after `char` (special tokens never match)."""
    real = [i for i, (s, e) in enumerate(offsets) if e > s]
    ends = [offsets[i][1] for i in real]
    at = bisect.bisect_right(ends, char)
    return real[at] if at < len(real) else len(offsets)


def marker_chunk_starts(tokenizer, token_ids: list[int], markers: list[str]) -> list[int]:
    """Token indices where a marker string starts, found in the decoded prompt through the tokenizer's offsets.

    The prompt is decoded and re-encoded with offsets; if that does not give
    back the same token ids, characters cannot be mapped to tokens reliably and
    this raises (pass item spans instead).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("caliope boundaries=markers needs a fast tokenizer (offset mapping); pass item spans instead")
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    for add_special in (True, False):
        encoded = tokenizer(text, add_special_tokens=add_special, return_offsets_mapping=True)
        if list(encoded["input_ids"]) == list(token_ids):
            break
    else:
        raise ValueError(
            "caliope boundaries=markers: re-encoding the decoded prompt does not give back its tokens, so marker "
            "positions cannot be mapped to tokens; use boundaries=spans with the task's item spans"
        )
    chars = sorted({hit for marker in markers for hit in _find_all(text, marker)})
    return [_char_to_token(encoded["offset_mapping"], c) for c in chars]


def _find_all(text: str, needle: str) -> list[int]:
    hits, at = [], text.find(needle)
    while at >= 0:
        hits.append(at)
        at = text.find(needle, at + 1)
    return hits


@register_method
@dataclass
class Caliope(Method):
    """`caliope:calibrator=hourglass,delta_min=5,delta_max=1000`: remap prompt positions by retrieved chunk."""

    name: ClassVar[str] = "caliope"

    calibrator: str
    """identity, moses, hourglass or decay."""
    delta_gap: float | None = None
    """moses: gap added after the middle chunk (default 10,000)."""
    delta_min: float | None = None
    """hourglass: gap at both ends (default 5)."""
    delta_max: float | None = None
    """hourglass: gap in the middle (default 1,000)."""
    delta_0: float | None = None
    """decay: scale of the gaps Δ_0 λ^k (default 1,000)."""
    lam: float | None = None
    """decay: ratio λ of consecutive gaps (default 0.95)."""
    boundaries: str = "spans"
    """spans: chunks are the harness's item spans; markers: chunks start where a marker string occurs."""
    markers: str | None = None
    """boundaries=markers: '|'-separated marker strings (default 'Document [')."""
    _tokenizer: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = {k: getattr(self, k) for k in ("delta_gap", "delta_min", "delta_max", "delta_0", "lam")}
        resolved = _check_params(self.calibrator, {k: v for k, v in given.items() if v is not None})
        for key, value in resolved.items():
            setattr(self, key, value)
        if self.boundaries not in BOUNDARY_MODES:
            raise ValueError(f"caliope: boundaries must be one of {list(BOUNDARY_MODES)}, got {self.boundaries!r}")
        if self.boundaries == "spans" and self.markers is not None:
            raise ValueError("caliope: markers only applies with boundaries=markers")
        if self.boundaries == "markers":
            self.markers = self.markers or DEFAULT_MARKERS
            if not any(self.marker_list()):
                raise ValueError("caliope: markers must hold at least one non-empty string")

    def params(self) -> dict[str, Any]:
        """Only the parameters that apply (so equal configurations have equal labels)."""
        return {k: v for k, v in super().params().items() if v is not None}

    def marker_list(self) -> list[str]:
        return [m for m in (self.markers or "").split("|") if m]

    def gap_params(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in CALIBRATOR_DEFAULTS[self.calibrator]}

    def attach(self, model, tokenizer) -> None:
        try:  # read, never install: CALIOPE changes only the position ids, and needs no hook of its own
            policies = layer_policies(model)
        except (AttributeError, UnsupportedModelError):
            policies = None  # no hook installed (every layer is the model's own RoPE), or no model given
        if policies is not None:
            refuse_without_rope(policies, "caliope", "remaps the positions that RoPE rotates by")
        self._tokenizer = tokenizer

    def detach(self, model) -> None:
        self._tokenizer = None

    def chunk_starts(self, batch: GenerationBatch, row: int) -> list[int]:
        """Start token (padded coordinates) of each retrieved chunk of `row`."""
        if self.boundaries == "spans":
            spans = batch.item_token_spans[row] if row < len(batch.item_token_spans) else []
            if not spans:
                raise ValueError(
                    f"caliope: row {row} has no item spans (the task gives no documents); CALIOPE needs chunk "
                    "boundaries: run a task with items (mdqa, kv) or use boundaries=markers"
                )
            return [start for start, _ in spans]
        if self._tokenizer is None:
            raise ValueError("caliope boundaries=markers needs the tokenizer; attach the method first")
        pad = int((batch.attention_mask[row] == 0).sum())
        ids = batch.input_ids[row, pad:].tolist()
        starts = marker_chunk_starts(self._tokenizer, ids, self.marker_list())
        if not starts:
            raise ValueError(f"caliope: none of the markers {self.marker_list()} occurs in the prompt of row {row}")
        return [pad + s for s in starts]

    def prefill_position_ids(self, batch: GenerationBatch) -> torch.Tensor:
        rows = []
        for row in range(batch.input_ids.shape[0]):
            starts = self.chunk_starts(batch, row)
            schedule = gap_schedule(self.calibrator, len(starts), **self.gap_params())
            phi = remap_positions(batch.position_ids[row], starts, schedule)
            real = batch.attention_mask[row].bool()
            phi = torch.where(real, phi, batch.position_ids[row].double())  # pads keep their (lower) position
            if not bool((phi[real].diff() > 0).all()):
                raise ValueError(f"caliope: remapped positions of row {row} are not strictly increasing")
            rows.append(phi)
        positions = torch.stack(rows)
        if not batch.position_ids.is_floating_point() and bool((positions == positions.round()).all()):
            return positions.to(batch.position_ids.dtype)  # integer gaps (identity, moses): keep integer positions
        return positions.float()
