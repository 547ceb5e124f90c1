"""LPES (Wang, Ding, Lv et al.): layer h sees positions / s_h, with the s_h read from a searched scale file.

Identical to `pi` except that the scale is per layer and comes from a file.
The file is what `python -m search run` writes; its format, reader and field
checks are `evaluation.methods.lpes.scale_file_format`, shared with `search`. Applying a
file needs only `format_version`, `num_layers` (against the model, at attach)
and `scales` (one finite number > 0 per layer), so a hand-made file of scales
alone is accepted; a file with a curve must have scales that follow it through
its control points, as `python -m search show FILE` checks (which also checks
every other field).

Stacked with `pi` (in either order) or another `lpes`, the scales multiply:
the one scaling rule of `repo_train.modeling.scaling`, which the search uses too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from evaluation.methods.base import register_method
from evaluation.methods.lpes.scale_file_format import ScaleFileError, read_scale_file
from evaluation.methods.policy_method import PolicyMethod
from evaluation.search_overlap import FittedExamples
from repo_train.modeling import PositionPolicy
from repo_train.modeling.scaling import scaled_policies


def read_scales(path: str | Path) -> tuple[list[float], dict[str, Any]]:
    """(per-layer scales, the whole JSON) of a scale file, after the checks in the module docstring."""
    data = read_scale_file(path, complete=False, context="lpes")
    return [float(s) for s in data["scales"]], data


@register_method
@dataclass
class LayerScaledRope(PolicyMethod):
    """`lpes:scale_file=PATH`: layer h sees positions / s_h from the scale file (NoPE layers stay unrotated)."""

    name: ClassVar[str] = "lpes"

    scale_file: str
    """Path of a scale file written by `python -m search run`."""
    scales: list[float] = field(init=False, repr=False)
    used: dict[str, Any] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.scales, data = read_scales(self.scale_file)  # a bad file fails when the spec is parsed
        search = data.get("search")
        self.used = search.get("examples_used") if isinstance(search, dict) else None

    def fitted_examples(self) -> FittedExamples | None:
        """The examples its search used (None for a file that does not record them): never scored on those."""
        return None if not self.used else FittedExamples.from_record(str(self.scale_file), self.used)

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        if len(self.scales) != len(current):
            raise ScaleFileError(
                f"lpes: {self.scale_file} has scales for {len(self.scales)} layers, the model has {len(current)}: "
                "use a scale file searched for this model"
            )
        return scaled_policies(model, self.scales, method="lpes")
