"""Tokens per second per GPU that `fit` reached on real GPUs, and the hours a run takes by them.

The plan's hours come from these records, not from an assumed MFU, so a researcher budgets with what
the code actually did. Each record is one `python -m workflows benchmark-fit` run (its report file is
named); add a record when a benchmark runs on new hardware or with a new engine switch. A setting no
record matches falls back to an assumed MFU, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass

#: MFU the hours assume where no measurement matches (OLMo-core's published 1B figure is 39-48% on H100).
ASSUMED_MFU = 0.40


@dataclass(frozen=True)
class Measurement:
    gpu: str
    date: str
    versions: str
    preset: str
    position: str  # "rope" or "repo": REPO's predictor costs FLOPs RoPE's layers do not
    seq_len: int
    micro_batch: int
    activation_checkpointing: bool | str
    strategy: str
    precision: str
    tokens_per_s: float  # per GPU
    mfu: float
    peak_memory_gib: float
    source: str
    engine: str = ""  # engine switches on beyond the config's (compile, chunked loss, ...); "" = none

    def describe(self) -> str:
        checkpointing = "with" if self.activation_checkpointing else "without"
        switches = f", {self.engine}" if self.engine else ""
        return (
            f"{self.tokens_per_s:,.0f} tokens/s per GPU ({self.mfu:.1%} MFU) measured on one {self.gpu} on {self.date}: "
            f"{self.preset} {self.position}, sequence {self.seq_len:,}, micro batch {self.micro_batch}, {checkpointing} "
            f"activation checkpointing{switches}, {self.strategy}, {self.precision} ({self.source})"
        )


_H200 = "NVIDIA H200"
_H200_VERSIONS = "torch 2.11.0+cu130, transformers 5.24.0, DeepSpeed 0.19.8, Lightning 2.6.6, SDPA"
_H200_FILE = "docs/measurements/benchmark-fit-h200-2026-11-28.json"

MEASUREMENTS: tuple[Measurement, ...] = tuple(
    Measurement(_H200, "2026-11-28", _H200_VERSIONS, "olmo2-1b", position, 4096, micro, checkpointing,
                "DeepSpeed ZeRO-2", "bf16-mixed", rate, mfu, peak, _H200_FILE)
    for position, micro, checkpointing, rate, mfu, peak in (
        ("rope", 4, False, 32083, 0.2751, 91.14),
        ("repo", 4, False, 32331, 0.2795, 91.78),
        ("rope", 4, True, 26342, 0.2259, 54.13),
        ("repo", 4, True, 26447, 0.2287, 54.30),
        ("rope", 12, True, 28011, 0.2402, 117.99),
    )
)  # fmt: skip


def checkpointing_key(mode: bool | str) -> str:
    """One spelling per activation-checkpointing setting, so records and settings compare."""
    text = str(mode).lower()
    return {"false": "none", "": "none", "true": "full"}.get(text, text)


def closest_measurement(
    preset: str | None,
    position: str,
    seq_len: int,
    micro_batch: int,
    activation_checkpointing: bool | str,
    engine: tuple[str, ...] = (),
) -> tuple[Measurement, list[str]] | None:
    """The record of this model, method and sequence length with the same checkpointing setting (the same
    engine switches and micro batch first, else the nearest), and how the setting differs from it; None when
    none has them. `engine` names the switches on, as `Measurement.engine` does ("loss chunk 4096", ...)."""
    wanted = checkpointing_key(activation_checkpointing)
    same = [
        m
        for m in MEASUREMENTS
        if m.preset == preset
        and m.position == position
        and m.seq_len == seq_len
        and checkpointing_key(m.activation_checkpointing) == wanted
    ]
    if not same:
        return None
    wanted_engine = set(engine)

    def distance(m: Measurement) -> tuple[int, int, int]:
        switches = set(filter(None, m.engine.split(", ")))
        return (len(switches ^ wanted_engine), abs(m.micro_batch - micro_batch), -m.micro_batch)

    best = min(same, key=distance)
    differences = [] if best.micro_batch == micro_batch else [f"micro batch {micro_batch}, not {best.micro_batch}"]
    measured_switches = set(filter(None, best.engine.split(", ")))
    differences += [f"{switch} (not measured)" for switch in sorted(wanted_engine - measured_switches)]
    differences += [f"without {switch} (measured with it)" for switch in sorted(measured_switches - wanted_engine)]
    return best, differences


def training_hours(tokens: float, gpus: int, tokens_per_s: float) -> float:
    """Hours to train `tokens` on `gpus` GPUs at `tokens_per_s` each (linear scaling across GPUs assumed)."""
    return tokens / (tokens_per_s * gpus) / 3600
