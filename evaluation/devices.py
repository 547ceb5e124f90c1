"""Where a run may put a model it loads itself: `Device`, the option's type, and `DEVICES`, its values.

Plain Python, below both users: the command's config (`evaluation.run_config`, torch-free) types its
`device` option with it, and model loading (`evaluation.model_loading.place_model`, torch) checks a device by it.
"""

from __future__ import annotations

from typing import Literal, get_args

Device = Literal["auto", "cpu", "cuda"]
DEVICES = get_args(Device)
