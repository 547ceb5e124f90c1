"""LPES (Wang, Ding, Lv et al.): layer h sees positions / s_h, with the s_h read from a searched scale file.

Identical to `pi` except that the scale is per layer and comes from a file.
The file is what `python -m search run` writes (search/scale_file.py,
`format_version` 1). `search` imports `evaluation`, never the reverse, so this
module reads the file itself and checks only what applying it needs:
`format_version`, `num_layers` (against the model, at attach) and `scales`
(one finite number > 0 per layer). The full validator (curve agrees with the
control points, fitness, search record) is `python -m search show FILE`.

Stacked after `pi`, the scales multiply, as stacked `pi` scales do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from evaluation.methods.base import PolicyMethod, register_method
from repo_train.modeling import PositionPolicy
from repo_train.modeling.scaling import scaled_policies

#: The scale-file version this reader understands (search/scale_file.py FORMAT_VERSION).
SCALE_FILE_VERSION = 1
_FIX = "regenerate it with `python -m search run`, or check it with `python -m search show FILE`"


class ScaleFileReadError(ValueError):
    """A scale file the `lpes` method cannot apply; the message says why and what to do."""


def read_scales(path: str | Path) -> tuple[list[float], dict[str, Any]]:
    """(per-layer scales, the whole JSON) of a scale file, after the checks in the module docstring."""
    path = Path(path)
    if not path.is_file():
        raise ScaleFileReadError(f"lpes: no scale file at {str(path)!r}; pass the .json `python -m search run` wrote")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ScaleFileReadError(f"lpes: {path} is not valid JSON ({err.msg}); {_FIX}") from None
    if not isinstance(data, dict) or "format_version" not in data:
        raise ScaleFileReadError(f"lpes: {path} is not an LPES scale file (no format_version); {_FIX}")
    if data["format_version"] != SCALE_FILE_VERSION:
        raise ScaleFileReadError(
            f"lpes: {path} has format_version {data['format_version']!r}, this code reads {SCALE_FILE_VERSION}; {_FIX}"
        )
    num_layers, scales = data.get("num_layers"), data.get("scales")
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise ScaleFileReadError(f"lpes: {path}: num_layers must be a positive integer, got {num_layers!r}; {_FIX}")
    if not isinstance(scales, list) or len(scales) != num_layers:
        count = len(scales) if isinstance(scales, list) else scales
        raise ScaleFileReadError(f"lpes: {path}: needs {num_layers} scales (one per layer), got {count!r}; {_FIX}")
    bad = [
        (i, s)
        for i, s in enumerate(scales)
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0
    ]
    if bad:
        raise ScaleFileReadError(
            f"lpes: {path}: scales must be finite numbers > 0, got (layer, scale) {bad[:5]}; {_FIX}"
        )
    return [float(s) for s in scales], data


@register_method
@dataclass
class LayerScaledRope(PolicyMethod):
    """`lpes:scale_file=PATH`: layer h sees positions / s_h from the scale file (NoPE layers stay unrotated)."""

    name: ClassVar[str] = "lpes"

    scale_file: str
    """Path of a scale file written by `python -m search run`."""
    scales: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.scales, _ = read_scales(self.scale_file)  # a bad file fails when the spec is parsed

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        if len(self.scales) != len(current):
            raise ScaleFileReadError(
                f"lpes: {self.scale_file} has scales for {len(self.scales)} layers, the model has {len(current)}: "
                "use a scale file searched for this model"
            )
        return scaled_policies(model, self.scales, multiply=True, method="lpes")
