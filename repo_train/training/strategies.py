"""Training strategies by name: DeepSpeed ZeRO-2 (GPU), its CPU twin for tests, DDP.

Lightning's `DeepSpeedStrategy` refuses any accelerator but CUDA in
`setup_environment`. `CPUDeepSpeedStrategy` is identical except that it skips
that check and uses gloo, so the real DeepSpeed engine (partitioned optimizer
state, its checkpoint layout, `zero_to_fp32`) runs in CPU tests. It is for
tests and small experiments only: DeepSpeed on CPU is slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lightning_fabric.utilities.seed import reset_seed
from pytorch_lightning.strategies import DDPStrategy, DeepSpeedStrategy, StrategyRegistry

#: The paper's ZeRO-2 settings, shipped inside the package so an installed copy finds them without a checkout.
DEFAULT_ZERO2_CONFIG = Path(__file__).with_name("zero2.json")


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    """DeepSpeed ZeRO on CPU processes (gloo). Identical to DeepSpeedStrategy except the CUDA check."""

    strategy_name = "deepspeed_cpu"

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("process_group_backend", "gloo")
        super().__init__(*args, **kwargs)

    def setup_environment(self) -> None:
        DDPStrategy.setup_environment(self)  # skip DeepSpeedStrategy's "CUDA only" check

    @property
    def root_device(self) -> torch.device:
        # DeepSpeed reads `root_device.index` as its device rank; a bare "cpu" has none.
        return torch.device("cpu", 0)

    def setup_distributed(self) -> None:
        # DeepSpeedStrategy's version, minus the check that devices are CUDA indices.
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()


def load_deepspeed_config(path: str | Path | None) -> dict:
    """A DeepSpeed JSON config, with a clear error when it is missing or malformed."""
    path = Path(path) if path else DEFAULT_ZERO2_CONFIG
    if not path.is_file():
        raise FileNotFoundError(
            f"DeepSpeed config {path} not found; fix the path, or omit it for the packaged ZeRO-2 config."
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"DeepSpeed config {path} is not valid JSON: {err}") from None


def build_strategy(name: str, deepspeed_config: str | None = None, find_unused_parameters: bool = False):
    """Strategy object for a name: deepspeed (ZeRO-2 from the JSON), deepspeed_cpu, ddp, ddp_cpu, auto."""
    if name == "deepspeed":
        return DeepSpeedStrategy(config=load_deepspeed_config(deepspeed_config))
    if name == "deepspeed_cpu":
        return CPUDeepSpeedStrategy(config=load_deepspeed_config(deepspeed_config))
    if name in ("ddp", "ddp_cpu"):
        return DDPStrategy(find_unused_parameters=find_unused_parameters)
    if name == "auto":
        return "auto"
    raise ValueError(f"unknown strategy {name!r}; choose deepspeed, deepspeed_cpu, ddp or auto.")


if "deepspeed_cpu" not in StrategyRegistry:
    StrategyRegistry.register(
        "deepspeed_cpu",
        CPUDeepSpeedStrategy,
        description="DeepSpeed ZeRO-2 on CPU processes (tests)",
        config=None,
        stage=2,
    )
