"""The plan of a `fit` command before the allocation: per-GPU peak memory and hours, from its parsed settings.

`python -m repo_train fit --config C --plan.only true` prints it and trains nothing; the loop's dry run
prints it for each train step. A config names the memory of the GPU it is for (`plan.gpu_memory_gib`);
a setting predicted not to fit it with `memory_plan.HEADROOM` to spare is refused in one line naming
the options that would fit. The hours come from a measured throughput (`measured_throughput`), named in
the plan, or from an assumed MFU where no measurement matches, which the plan says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from repo_train.data import DataSource, SyntheticTextData
from repo_train.modeling import RePoOlmo2Config
from repo_train.modeling.accounting import training_flops_per_token
from repo_train.modeling.presets import preset
from repo_train.training import measured_throughput
from repo_train.training.memory_plan import GIB, HEADROOM, MemoryPlan, MemorySetting, plan_memory, settings_that_fit
from repo_train.training.module import model_config_fields


@dataclass
class PlanOptions:
    """The plan's options (the `plan:` section of a fit config).

    Args:
        gpu_memory_gib: memory of one GPU the config is for, in GiB as CUDA reports it (an H100 80GB: about
            79); the plan refuses a setting whose predicted peak leaves less than 10% of it free. None = not
            judged.
        only: print the plan (per-GPU peak memory by term, hours from a named measurement) and exit: train
            nothing.
    """

    gpu_memory_gib: float | None = None
    only: bool = False


@dataclass
class TrainingPlan:
    memory: MemoryPlan
    gpu_memory_gib: float | None
    global_batch: int
    hours: float | None
    hours_basis: str
    rate: str = ""  # the throughput the hours use, in a few words

    @property
    def fits(self) -> bool:
        return self.gpu_memory_gib is None or self.memory.fits(self.gpu_memory_gib)

    def summary(self) -> str:
        """One short line: the peak against the GPU's memory, and the hours with the throughput they rest on."""
        peak = f"peak ≈ {self.memory.peak / GIB:.1f} GiB per GPU"
        if self.gpu_memory_gib:
            peak += f" of {self.gpu_memory_gib:g} ({1 - self.memory.peak / (self.gpu_memory_gib * GIB):.0%} free)"
        if self.hours is None:
            return f"{peak}, time unknown"
        return f"{peak}, ≈ {self.hours:.1f} h at {self.rate}"

    def report(self) -> str:
        """The whole plan: the setting, the memory by term and what the hours rest on."""
        setting = self.memory.setting
        head = (
            f"{setting.strategy} on {setting.world_size} process{'es' * (setting.world_size > 1)}, micro batch "
            f"{setting.micro_batch} × sequence {setting.seq_len:,}, activation checkpointing "
            f"{setting.activation_checkpointing}, loss chunk {setting.loss_chunk_tokens or 'off'}, {setting.precision}"
        )
        hours = f"unknown ({self.hours_basis})" if self.hours is None else f"≈ {self.hours:.1f} h: {self.hours_basis}"
        return (
            f"{head}\n{self.summary()}\nmemory per GPU (the memory model, repo_train/training/memory_plan.py):\n"
            f"{self.memory.table()}\nhours: {hours}"
        )

    def refusal(self) -> str | None:
        """The one-line refusal of a setting that does not fit its GPU, naming the options that would; None if it fits."""
        if self.fits:
            return None
        budget = (1 - HEADROOM) * self.gpu_memory_gib
        line = (
            f"the predicted peak of {self.memory.peak / GIB:.1f} GiB per GPU does not fit a {self.gpu_memory_gib:g} GiB "
            f"GPU with {HEADROOM:.0%} to spare ({budget:.1f} GiB)"
        )
        options = settings_that_fit(self.memory.setting, self.gpu_memory_gib, self.global_batch)
        if options:
            fix, plan = options[0]
            return f"{line}: {fix} would ({plan.peak / GIB:.1f} GiB); set it in the config or on the command line"
        return f"{line}, and no micro batch, chunked loss or activation checkpointing would: use more GPUs"


def strategy_of(value: Any) -> tuple[str, int]:
    """(memory-plan strategy name, ZeRO stage) of a parsed `trainer.strategy` (a name or a class_path mapping)."""
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        name, args = str(value.get("class_path", "")), value.get("init_args") or {}
    else:
        name, args = str(value), {}
    lowered = name.lower()
    if "deepspeed" in lowered:
        return "deepspeed", zero_stage(args)
    if "modelparallel" in lowered or "fsdp2" in lowered:
        return "fsdp2", 0
    if "ddp" in lowered:
        return "ddp", 0
    return "single", 0


def zero_stage(args: dict) -> int:
    """The ZeRO stage DeepSpeedStrategy's arguments ask for: its `config` (a JSON file or a dict), else `stage`."""
    config = args.get("config")
    if isinstance(config, str) and Path(config).is_file():
        config = json.loads(Path(config).read_text(encoding="utf-8"))
    if isinstance(config, dict):
        return int((config.get("zero_optimization") or {}).get("stage", 2))
    return int(args.get("stage", 2))


def model_config_of(value: Callable[[str], Any]):
    """The model `fit` would build, without weights: `init_from`'s config.json when that folder is here, else the
    preset (the 1B and 7B configs name the shape of their `init_from` as their preset for this)."""
    fields = model_config_fields(
        SimpleNamespace(config_overrides=value("model.config_overrides"), position=value("model.position"))
    )
    init_from = value("model.init_from")
    if init_from and (Path(init_from) / "config.json").is_file():
        return RePoOlmo2Config.from_pretrained(init_from, **fields), "init_from"
    return preset(value("model.preset_name"), **fields), value("model.preset_name")


def seq_len_of(train: Any) -> int:
    """The sequence length of the training data source (its `seq_len`)."""
    if train is None:
        return SyntheticTextData().seq_len
    return DataSource.from_config(train.as_dict() if hasattr(train, "as_dict") else train, "data.train").seq_len


def position_kind(config) -> str:
    """ "repo" when any layer learns positions (its predictor costs time), else "rope" (RoPE, NoPE, mixes)."""
    return "repo" if "repo" in str(getattr(config, "position_method", "")) else "rope"


def engine_switches(value: Callable[[str], Any]) -> tuple[str, ...]:
    """The engine switches a `fit` setting turns on, named as `measured_throughput.Measurement.engine` names them."""
    switches = []
    if value("model.loss_chunk_tokens"):
        switches.append(f"loss chunk {value('model.loss_chunk_tokens')}")
    if value("model.compile"):
        switches.append("compile")
    if value("model.fused_adamw"):
        switches.append("fused AdamW")
    if strategy_of(value("trainer.strategy"))[0] == "fsdp2":
        switches.append("FSDP2")
    return tuple(switches)


def training_plan(value: Callable[[str], Any], world_size: int | None = None) -> TrainingPlan:
    """The plan of the parsed `fit` settings `value(dotted key)`; `world_size` overrides devices × nodes."""
    config, preset_name = model_config_of(value)
    devices = value("trainer.devices")
    world = world_size or (devices if isinstance(devices, int) else 1) * (value("trainer.num_nodes") or 1)
    strategy, stage = strategy_of(value("trainer.strategy"))
    if strategy == "single" and world > 1:
        strategy = "ddp"
    seq_len = seq_len_of(value("data.train"))
    setting = MemorySetting(
        config=config,
        seq_len=seq_len,
        micro_batch=value("data.micro_batch_size"),
        world_size=world,
        strategy=strategy,
        zero_stage=stage or 2,
        precision=str(value("trainer.precision")),
        activation_checkpointing=value("model.activation_checkpointing"),
        loss_chunk_tokens=value("model.loss_chunk_tokens") or 0,
    )
    memory = plan_memory(setting)
    steps, batch = value("trainer.max_steps"), value("data.global_batch_size")
    hours, basis, rate = None, "no max_steps", ""
    if steps and steps > 0:
        tokens = steps * batch * seq_len
        kind = position_kind(config)
        found = measured_throughput.closest_measurement(
            preset_name, kind, seq_len, setting.micro_batch, setting.activation_checkpointing, engine_switches(value)
        )
        if found is not None:
            measurement, differences = found
            hours = measured_throughput.training_hours(tokens, world, measurement.tokens_per_s)
            differs = f"; this run differs: {', '.join(differences)}" if differences else ""
            basis = f"{tokens / 1e9:.1f}B tokens at {measurement.describe()}{differs}"
            rate = f"{measurement.tokens_per_s:,.0f} tokens/s per GPU (measured, {measurement.gpu}, {measurement.date})"
        else:
            peak = value("throughput.peak_tflops_per_device")
            if peak:
                assumed = measured_throughput.ASSUMED_MFU * peak * 1e12 / training_flops_per_token(config, seq_len)
                hours = measured_throughput.training_hours(tokens, world, assumed)
                rate = f"an assumed {measured_throughput.ASSUMED_MFU:.0%} MFU (no measurement)"
                basis = (
                    f"{tokens / 1e9:.1f}B tokens at an assumed {measured_throughput.ASSUMED_MFU:.0%} MFU of "
                    f"{peak:g} TFLOP/s: no measurement of this model, method, sequence length and checkpointing"
                )
            else:
                basis = "no measurement of this setting and no throughput.peak_tflops_per_device to assume an MFU of"
    return TrainingPlan(memory, value("plan.gpu_memory_gib"), batch, hours, basis, rate)
