"""The options of `python -m workflows reproduce-reversal` (`Reversal`), in a module that loads no torch: the
command's `--help`, `--print_config` and refusals answer without it."""

from __future__ import annotations

from dataclasses import dataclass, field

from workflows.commands import check_run_directory
from workflows.reversal.names import DESCRIPTIONS

ALL_METHODS = ("nope", "rope", "repo")


@dataclass
class Reversal:
    """The reproduction's options (each also a key of a `--config` file), judged when built: `methods` becomes a
    list, and the length bounds (`train_min`, `train_max`, `test_min`, `test_max`) are derived."""

    out: str = "outputs/reversal"
    """output directory (created; resumes)"""
    seeds: int = 3
    """seeds per method (0, 1, ...)"""
    methods: list[str] | str = field(default_factory=lambda: list(ALL_METHODS))
    """position methods: comma-separated on the command line, or a list"""
    steps: int = 1500
    """training steps per model"""
    hidden: int = 128
    """model width (4 layers, 4 heads, FFN 4x)"""
    lr: float = 1e-2
    """peak learning rate (linear decay to 0)"""
    warmup: int = 100
    """linear warm-up steps"""
    batch_size: int = 32
    """sequences per step"""
    train_examples: int = 50000
    """training sequences per seed (steps x batch = 48,000 are used)"""
    examples_per_length: int = 50
    """test sequences per length"""
    train_lengths: str = "2-20"
    """training lengths MIN-MAX (paper: 2-20)"""
    test_lengths: str = "2-30"
    """test lengths MIN-MAX (paper: 2-30)"""
    eval_batch_size: int = 32
    """prompts per forward in evaluation"""
    threads: int = 1
    """torch threads per command (OMP_NUM_THREADS); 1 is fastest on a shared 2-core CPU"""

    def __post_init__(self) -> None:
        """The domain checks (a ValueError naming the option), then where it writes."""
        methods = self.methods.split(",") if isinstance(self.methods, str) else self.methods
        self.methods = [m.strip() for m in methods if m.strip()]
        unknown = sorted(set(self.methods) - set(ALL_METHODS))
        if unknown or not self.methods:
            raise ValueError(f"--methods: unknown {unknown}; choose from {list(ALL_METHODS)}")
        self.train_min, self.train_max = _length_range("--train_lengths", self.train_lengths)
        self.test_min, self.test_max = _length_range("--test_lengths", self.test_lengths)
        for name in ("seeds", "steps", "hidden", "batch_size", "train_examples", "examples_per_length", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        check_run_directory(self.out, "a reversal reproduction", DESCRIPTIONS)


def _length_range(flag: str, text: str) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f"{flag} must look like 2-20, got {text!r}") from None
    if not 1 <= low <= high:
        raise ValueError(f"{flag}: need 1 <= MIN <= MAX, got {text!r}")
    return low, high
