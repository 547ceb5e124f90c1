"""DeepSpeed on CPU for tests, registered as the "deepspeed_cpu" strategy.

Lightning's `DeepSpeedStrategy` refuses any accelerator but CUDA in
`setup_environment`. `CPUDeepSpeedStrategy` is identical except that it skips
that check and uses gloo, so the real DeepSpeed engine (partitioned optimizer
state, its checkpoint layout, `zero_to_fp32`) runs in CPU tests. It is for
tests and small experiments only: DeepSpeed on CPU is slow. The paper's ZeRO-2
settings (`DEFAULT_ZERO2_CONFIG`, package data) are what the training configs
and check-gpu pass to Lightning's own `DeepSpeedStrategy`.
"""

from __future__ import annotations

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


if "deepspeed_cpu" not in StrategyRegistry:
    StrategyRegistry.register(
        "deepspeed_cpu",
        CPUDeepSpeedStrategy,
        description="DeepSpeed ZeRO-2 on CPU processes (tests)",
        config=None,
        stage=2,
    )
