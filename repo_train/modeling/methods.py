"""Position methods: a name in the config -> one policy per layer.

`position_method` is what a user picks (the REPO paper's baselines and
method); it expands to a per-layer list of policy names, then to policy
objects. Mixed layouts are entries in `LAYER_PLANS`; the name of any other
registered policy means that policy in every layer, so a new policy needs no
entry here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import yaml

from repo_train.modeling import repo_policy  # noqa: F401  (registers the 'repo' policy)
from repo_train.modeling.policy import POSITION_POLICIES, PositionPolicy
from repo_train.modeling.position_config import PositionConfig, PositionMethod, position_from_mapping
from repo_train.modeling.rope import RotaryEncoding


def _every_third(first_two: str, third: str) -> Callable[[int, int], list[str]]:
    def plan(num_layers: int, start_layer: int) -> list[str]:
        return [third if i % 3 == 2 else first_two for i in range(num_layers)]

    return plan


#: position_method -> (num_layers, repo_start_layer) -> per-layer policy names.
LAYER_PLANS: dict[str, Callable[[int, int], list[str]]] = {
    "rope": lambda n, start: ["rope"] * n,
    "nope": lambda n, start: ["nope"] * n,
    # Every three layers, two RoPE then one NoPE (R2N1), or two NoPE then one RoPE (N2R1).
    "r2n1": _every_third("rope", "nope"),
    "n2r1": _every_third("nope", "rope"),
    "repo": lambda n, start: ["rope"] * start + ["repo"] * (n - start),
}


def default_repo_start_layer(num_layers: int) -> int:
    """⌊L/3⌋: layer 5 of the 16-layer OLMo-2 1B, layer 10 of the 32-layer 7B."""
    return num_layers // 3


def position_methods() -> list[str]:
    """Every valid `position_method`: the plans above and every registered policy's name."""
    return sorted(set(LAYER_PLANS) | set(POSITION_POLICIES))


def check_method_name(position_method: str) -> None:
    """An unknown method name is one line listing the known ones."""
    if position_method not in position_methods():
        raise ValueError(
            f"unknown position_method {position_method!r}; choose one of {position_methods()} (a policy of your own "
            "is known once its module is imported: --import MODULE)."
        )


def layer_plan(position_method: str, num_layers: int, repo_start_layer: int | None = None) -> list[str]:
    """Per-layer policy names for a method, with clear errors for bad input."""
    check_method_name(position_method)
    start = default_repo_start_layer(num_layers) if repo_start_layer is None else repo_start_layer
    if not isinstance(start, int) or not 0 <= start < num_layers:
        raise ValueError(
            f"repo_start_layer must be an integer in [0, {num_layers - 1}] for a {num_layers}-layer model, "
            f"got {repo_start_layer!r} (default ⌊L/3⌋ = {default_repo_start_layer(num_layers)})."
        )
    if position_method not in LAYER_PLANS:
        return [position_method] * num_layers
    return LAYER_PLANS[position_method](num_layers, start)


def resolve_position(value: PositionConfig | Mapping[str, Any] | str, where: str = "model.position") -> PositionConfig:
    """`model.position` in any of its forms as an object: a method name (its default options), a
    `{class_path, init_args}` mapping, or the object itself."""
    if isinstance(value, PositionConfig):
        return value
    if hasattr(value, "as_dict"):  # a parsed config's namespace
        value = value.as_dict()
    if isinstance(value, str) and value.lstrip().startswith("{"):  # a mapping the parser took for a method name
        with contextlib.suppress(yaml.YAMLError):
            value = yaml.safe_load(value)
    if isinstance(value, Mapping):
        return position_from_mapping(value, where)
    if not isinstance(value, str) or value not in position_methods():
        raise ValueError(
            f"{where}: unknown position method {value!r}; choose one of {position_methods()} or a position config "
            "{class_path: ..., init_args: {...}} (a policy of your own is known once its module is imported: "
            "--import MODULE)"
        )
    options = POSITION_POLICIES[value].Options if value in POSITION_POLICIES else None
    return options() if options is not None else PositionMethod(value)


def position_of_fields(
    position_method: str,
    position_options: dict | None = None,
    repo_start_layer: int | None = None,
    repo_hidden_size: int | None = None,
) -> PositionConfig:
    """The position config that model-config fields describe (a saved config.json, or an old checkpoint's
    module options): the inverse of `PositionConfig.model_config_fields`."""
    fields = SimpleNamespace(
        position_method=position_method,
        position_options=position_options or {},
        repo_start_layer=repo_start_layer,
        repo_hidden_size=repo_hidden_size,
    )
    check_method_name(position_method)
    if position_method not in POSITION_POLICIES:
        check_position_options(fields)  # a layer plan takes none
        return PositionMethod(position_method)
    options = POSITION_POLICIES[position_method].options_from(fields)  # None: the policy takes none
    return options if options is not None else PositionMethod(position_method)


def check_position_options(config) -> None:
    """`config.position_options` belong to the policy named by `position_method` (a layer plan takes none)."""
    options = getattr(config, "position_options", None) or {}
    if config.position_method in POSITION_POLICIES:
        POSITION_POLICIES[config.position_method].options_from(config)
    elif options:
        raise ValueError(
            f"position_options {sorted(options)}: position method {config.position_method!r} is a layer plan and "
            "takes no options"
        )


def build_policies(config) -> list[PositionPolicy]:
    """The policies a `RePoOlmo2Config` (or any config with the same fields) asks for."""
    names = layer_plan(config.position_method, config.num_hidden_layers, config.repo_start_layer)
    # Layers that compute their own rotation share one encoding of the config's RoPE variant.
    encoding = RotaryEncoding.from_config(config) if any(POSITION_POLICIES[n].needs_encoding for n in names) else None
    return [POSITION_POLICIES[name].from_config(config, encoding) for name in names]
