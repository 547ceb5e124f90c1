"""PositionalHidden (Yu et al., "Mitigate Position Bias in Large Language Models via Scaling a Single Dimension",
ACL Findings 2025): scale the model's "positional" hidden-state channels in the attention input of chosen layers.

`positional_hidden:config=FILE.json` reads one of the authors' per-model files (their `configs/*.json`, or what
`python -m search positional-dims` writes) as it is: keys `dims`, `layers`, `factor`, `skip_first`,
`last_recompute_tokens`, `change_value`; any other key (a search's candidate scores) is ignored. The same keys
may be given inline, where a list is written with ';' between items and 'A-B' for a range of integers
(`positional_hidden:dims=213,layers=10-25,factor=0`; `layers=none` is the empty list); an inline key overrides
the file's. Absent keys take the authors' code defaults (factor 0, skip_first 0, last_recompute_tokens 1,
change_value false); `dims` and `layers` have none.

The attention rule is `repo_train.modeling.hidden_scale_policy`. Teacher-forced scoring (`--score gold_loglik`,
lm-eval's loglikelihood, both through `decoding.score_continuations`) recomputes the prompt's last row and every
continuation row, as the authors' validation script does (experiments/search_dimension/eval_on_valid_set.py sets
last_recompute_tokens to the answer's length + 1): `start` sets the prefill's recomputed rows to 1 for such a
batch, and each continuation token, fed after the cache, is recomputed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from evaluation.methods.base import GenerationState, register_method
from evaluation.methods.policy_method import PolicyMethod
from repo_train.modeling import PositionPolicy
from repo_train.modeling.hidden_scale_policy import HiddenScale, HiddenScalePolicy

#: The keys of the authors' config files, with their defaults in the authors' code (None: no default).
CONFIG_KEYS: dict[str, Any] = {
    "dims": None,
    "layers": None,
    "factor": 0.0,
    "skip_first": 0,
    "last_recompute_tokens": 1,
    "change_value": False,
}


def parse_int_list(text: str, key: str) -> list[int]:
    """`'10-25'`, `'213;1081'`, `'1;4-6'` or `'none'` as a list of integers; anything else is a one-line error."""
    if text.strip().lower() == "none":
        return []
    values: list[int] = []
    for part in text.split(";"):
        low, dash, high = part.strip().partition("-")
        try:
            values.extend(range(int(low), int(high) + 1) if dash else [int(low)])
        except ValueError:
            raise ValueError(
                f"positional_hidden: {key}={text!r} is not a list of integers: write them with ';' between, "
                f"'A-B' for a range (e.g. {key}=10-25 or {key}=213;1081), or 'none'"
            ) from None
    return values


def read_config_file(path: str) -> dict[str, Any]:
    """The authors' keys of a config file (other keys ignored); a missing or malformed file is a one-line error."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"positional_hidden: config file {path!r} does not exist; give the path of a JSON file")
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"positional_hidden: config file {path!r} is not JSON ({err}); fix the file") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ValueError(  # noqa: TRY004  (a user's file: exit 2, one line)
            f"positional_hidden: config file {path!r} holds a {kind}, not an object of the authors' keys"
        )
    return {key: data[key] for key in CONFIG_KEYS if key in data}


def _checked_list(value: Any, key: str, source: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"positional_hidden: {key} in {source} must be a list of integers, got {value!r}")
    if any(v < 0 for v in value) or len(set(value)) != len(value):
        raise ValueError(f"positional_hidden: {key} in {source} must hold distinct indices >= 0, got {value!r}")
    return tuple(value)


def _number(value: Any, key: str, source: str, kind: type) -> Any:
    ok = isinstance(value, (int, float) if kind is float else kind) and not isinstance(value, bool)
    if kind is bool:
        ok = isinstance(value, bool)
    if not ok or (kind is float and not math.isfinite(value)):
        raise ValueError(f"positional_hidden: {key} in {source} must be {kind.__name__}, got {value!r}")
    return kind(value)


@register_method
@dataclass
class PositionalHidden(PolicyMethod):
    """`positional_hidden:config=FILE.json` (or the keys inline): the authors' hidden-state scaling."""

    name: ClassVar[str] = "positional_hidden"

    config: str | None = None
    """A JSON file in the authors' format (their configs/*.json, or `python -m search positional-dims`'s)."""
    dims: str | None = None
    """The channels of the attention input to scale: ';'-separated, 'A-B' ranges (overrides the file's)."""
    layers: str | None = None
    """The layers (0-based) whose attention input is scaled, as `dims`; 'none' for no layer."""
    factor: float | None = None
    """What the channels are multiplied by (authors' default 0)."""
    skip_first: int | None = None
    """Tokens at positions below it keep their channels (default 0)."""
    last_recompute_tokens: int | None = None
    """How many last rows of a prompt's forward are recomputed with the scaled input (default 1)."""
    change_value: bool | None = None
    """Also form the recomputed rows' values from the scaled input (default false)."""

    setting: HiddenScale = field(init=False, repr=False, compare=False)
    chosen_layers: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _policies: list = field(init=False, default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = read_config_file(self.config) if self.config is not None else {}
        source = f"config file {self.config!r}" if self.config is not None else "the spec"
        for key in ("dims", "layers"):
            inline = getattr(self, key)
            if inline is not None:
                given[key], source_of = parse_int_list(inline, key), "the spec"
            else:
                source_of = source
            if key not in given:
                raise ValueError(
                    f"positional_hidden needs {key}: give config=FILE.json (the authors' format) or {key}=... "
                    "inline (e.g. positional_hidden:dims=213,layers=10-25,factor=0)"
                )
            given[key] = _checked_list(given[key], key, source_of)
        for key, kind in (("factor", float), ("skip_first", int), ("last_recompute_tokens", int)):
            value = getattr(self, key)
            given[key] = _number(value if value is not None else given.get(key, CONFIG_KEYS[key]), key, source, kind)
        change_value = self.change_value if self.change_value is not None else given.get("change_value", False)
        given["change_value"] = _number(change_value, "change_value", source, bool)
        if given["skip_first"] < 0 or given["last_recompute_tokens"] < 1:
            raise ValueError(
                f"positional_hidden: skip_first must be >= 0 and last_recompute_tokens >= 1, got "
                f"{given['skip_first']} and {given['last_recompute_tokens']}"
            )
        self.chosen_layers = given.pop("layers")
        self.setting = HiddenScale(**given)

    def params(self) -> dict[str, Any]:
        """The parameters given (a key left out reads from the file or the authors' default, so it stays out)."""
        return {key: value for key, value in super().params().items() if value is not None}

    def layer_policies(self, model, current: list[PositionPolicy]) -> list[PositionPolicy]:
        width = model.config.hidden_size
        outside = [d for d in self.setting.dims if d >= width]
        if outside:
            raise ValueError(
                f"positional_hidden: dims {outside} are past the model's hidden size {width}; "
                "use a config searched for this model (python -m search positional-dims)"
            )
        past = [layer for layer in self.chosen_layers if layer >= len(current)]
        if past:
            raise ValueError(
                f"positional_hidden: layers {past} are past the model's {len(current)} layers; "
                "use a config searched for this model (python -m search positional-dims)"
            )
        chosen = set(self.chosen_layers)
        policies = [
            HiddenScalePolicy(policy, self.setting) if index in chosen else policy
            for index, policy in enumerate(current)
        ]
        self._policies = [p for p in policies if isinstance(p, HiddenScalePolicy)]
        return policies

    def detach(self, model) -> None:
        super().detach(model)
        self._policies = []

    def set_prefill_rows(self, rows: int | None) -> None:
        """Recompute the last `rows` rows of the next forwards without a cache (None: the setting's
        `last_recompute_tokens`). A forward over prompt + t generated tokens with t + 1 rows equals the cached
        decoding of those tokens (check-gpu's recomputation)."""
        for policy in self._policies:
            policy.prefill_rows = self.setting.last_recompute_tokens if rows is None else rows

    def start(self, state: GenerationState) -> None:
        self.set_prefill_rows(1 if state.teacher_forced else None)

    def finish(self, state: GenerationState) -> None:
        self.set_prefill_rows(None)
