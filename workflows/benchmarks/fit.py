"""Tokens/s, MFU and peak memory of `python -m repo_train fit` itself: RoPE and REPO alternating, one GPU.

What a user runs is the command with a shipped config, not a bare forward and
backward, so each run here is `python -m repo_train fit --config CONFIG` with
the config's own model shape, sequence length, precision and strategy
(bf16-mixed, DeepSpeed ZeRO-2 for the 1B configs) and only what a benchmark
must change: random weights (`init_from` null), synthetic data at the config's
`seq_len`, one device, `--steps` optimizer steps of `--accumulation` micro
batches, no checkpoints, a CSV log. `ThroughputMonitor` logs each optimizer
step's tokens/s, MFU (REPO's predictor counted in the FLOPs) and peak memory;
the first `--warmup` steps are dropped and the median of the rest reported.

Engine switches (`--switches`): each variant is a `+`-joined set of `SWITCHES`
(compile, chunked_loss, fused_adamw, fsdp2) on top of the eager engine (`eager`:
no compile, the whole-batch loss, torch's default AdamW, the config's strategy),
and every variant runs every setting, so one GPU session measures them all side
by side; the report gives each variant's tokens/s relative to `eager` at the
same setting. Activation checkpointing is a setting of its own
(`--activation_checkpointing false,true,every_2,attention,mlp`).

For each variant, activation-checkpointing setting and micro batch, RoPE then REPO run
`--rounds` times alternately; a micro batch that runs out of memory is
recorded as such and larger ones are skipped for that setting, so the list's
largest run that fits is the largest micro batch that fits. The REPO/RoPE
ratio is of step times (RoPE tokens/s / REPO tokens/s; REPO paper: ~0.8% more
FLOPs). Writes report.json, report.md and each run's log under `--out`.

    python -m workflows benchmark-fit --out outputs/benchmark-fit            # on a GPU node
    python -m workflows benchmark-fit --micro_batches 4,6,8 --activation_checkpointing false,true
    python -m workflows benchmark-fit --activation_checkpointing false,every_2 \
        --switches eager,compile,chunked_loss,fused_adamw,fsdp2,compile+chunked_loss+fused_adamw
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt

from repo_common.atomic import write_json_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, add_dataclass_options, dataclass_config
from repo_common.output_guard import check_output_directory
from workflows.commands import logged_csv_metrics

PROG = "python -m workflows benchmark-fit"
#: The checkout: every `fit` runs there (the configs' relative paths).
REPO = Path(__file__).resolve().parents[2]
MANIFEST = "report.json"
CONFIGS = {"rope": "configs/train/olmo2-1b-stage2-rope.yaml", "repo": "configs/train/olmo2-1b-stage2-repo.yaml"}
OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED")
#: The eager engine every variant starts from: what each switch below changes, set to its off value.
EAGER = ["--model.compile", "false", "--model.loss_chunk_tokens", "0", "--model.fused_adamw", "false"]
#: Engine switches of `fit` (docs/training.md, "Engine switches"): the overrides that turn each one on.
SWITCHES = {
    "compile": ["--model.compile", "true"],
    "chunked_loss": ["--model.loss_chunk_tokens", "4096"],
    "fused_adamw": ["--model.fused_adamw", "true"],
    "fsdp2": ["--trainer.strategy", '{"class_path": "pytorch_lightning.strategies.ModelParallelStrategy"}'],
}
#: `--activation_checkpointing` values (`model.activation_checkpointing`'s).
CHECKPOINTING = re.compile(r"false|true|every_[1-9][0-9]*|attention|mlp")


@dataclass
class FitBenchmark:
    """The benchmark's options (each also a key of a `--config` file), judged when built."""

    out: str = "outputs/benchmark-fit"
    """report and run logs"""
    rope_config: str = CONFIGS["rope"]
    """the RoPE run's fit config"""
    repo_config: str = CONFIGS["repo"]
    """the REPO run's fit config"""
    micro_batches: str = "4"
    """comma-separated micro batch sizes, ascending"""
    activation_checkpointing: str = "false,true"
    """comma-separated settings of model.activation_checkpointing (false, true, every_K, attention, mlp)"""
    switches: str = "eager"
    """comma-separated engine variants, each 'eager' or switches joined by '+' (compile, chunked_loss,
    fused_adamw, fsdp2), e.g. eager,compile,compile+chunked_loss"""
    steps: PositiveInt = 12
    """optimizer steps per run"""
    warmup: NonNegativeInt = 3
    """first optimizer steps not counted"""
    accumulation: PositiveInt = 4
    """micro batches per optimizer step"""
    rounds: PositiveInt = 1
    """RoPE/REPO pairs per setting"""
    run_timeout: PositiveInt = 300
    """seconds before one run is stopped"""
    fit_args: str = ""
    """more `fit` overrides for every run, space-separated (e.g. a CPU rehearsal's '--trainer.accelerator cpu
    --model.preset_name tiny')"""

    def __post_init__(self) -> None:
        """The lists parsed, the configs present, `--out` writable (a ValueError is the one-line refusal)."""
        self.micro_batch_list = _split(self.micro_batches, "--micro_batches", int)
        if any(size < 1 for size in self.micro_batch_list) or self.micro_batch_list != sorted(self.micro_batch_list):
            raise ValueError(f"--micro_batches {self.micro_batches!r}: give positive sizes in ascending order")
        self.checkpointing_list = _split(self.activation_checkpointing, "--activation_checkpointing", _checkpointing)
        self.variant_list = _split(self.switches, "--switches", _variant)
        if self.warmup >= self.steps:
            raise ValueError(f"--warmup {self.warmup} leaves no timed step of --steps {self.steps}: lower it")
        for option in ("rope_config", "repo_config"):
            if not Path(getattr(self, option)).is_file():
                raise ValueError(f"--{option} {getattr(self, option)}: no such file; pass a fit config (YAML)")

    def options(self) -> dict:
        """The options as given (what report.json records)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


OPTIONS = FitBenchmark


def add_arguments(parser: ConfigParser) -> None:
    parser.description = __doc__
    add_dataclass_options(parser, FitBenchmark)


def _split(text: str, option: str, convert) -> list:
    try:
        values = [convert(part.strip()) for part in str(text).split(",") if part.strip()]
    except ValueError as err:
        raise ValueError(f"{option} {text!r}: {err}") from None
    if not values:
        raise ValueError(f"{option} is empty: give comma-separated values")
    return values


def _checkpointing(text: str) -> bool | str:
    if not CHECKPOINTING.fullmatch(text.lower()):
        raise ValueError(f"{text!r} is not false, true, every_K, attention or mlp")
    return {"true": True, "false": False}.get(text.lower(), text.lower())


def _variant(text: str) -> str:
    names = [name.strip() for name in text.split("+")]
    unknown = [name for name in names if name not in SWITCHES and name != "eager"]
    if unknown or ("eager" in names and len(names) > 1):
        raise ValueError(f"{text!r}: a variant is 'eager' or switches joined by '+' from {', '.join(SWITCHES)}")
    return "+".join(names)


def variant_overrides(variant: str) -> list[str]:
    """`fit` overrides of an engine variant: the eager engine, then each switch's."""
    names = [] if variant == "eager" else variant.split("+")
    return [*EAGER, *(arg for name in names for arg in SWITCHES[name])]


def fit_argv(
    config: str, run_dir: Path, checkpointing: bool | str, micro_batch: int, options, variant: str = "eager"
) -> list[str]:
    """The `fit` command of one run: the config, then the benchmark's overrides and the variant's, then the
    user's."""
    return [
        sys.executable, "-m", "repo_train", "fit", "--config", config,
        "--trainer.devices", "1", "--trainer.num_nodes", "1",
        "--trainer.max_steps", str(options.steps), "--trainer.log_every_n_steps", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(run_dir),
        "--trainer.logger", "pytorch_lightning.loggers.CSVLogger", "--trainer.logger.save_dir", str(run_dir),
        "--model.init_from", "null", "--model.activation_checkpointing", str(checkpointing).lower(),
        "--data.train", "repo_train.data.SyntheticData", "--data.train.num_samples", "100000",
        "--data.global_batch_size", str(micro_batch * options.accumulation),
        "--data.micro_batch_size", str(micro_batch),
        "--checkpoint.every_n_train_steps", str(options.steps * 1000), "--checkpoint.save_last", "false",
        "--throughput.window", "1",
        *variant_overrides(variant),
        *options.fit_args.split(),
    ]  # fmt: skip


def run_once(
    method: str, config: str, checkpointing: bool | str, micro_batch: int, run_dir: Path, options, variant: str
) -> dict:
    """One `fit` run; its median tokens/s, MFU and peak memory over the timed steps, or why there are none."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "fit.log"
    record = {
        "method": method,
        "variant": variant,
        "activation_checkpointing": checkpointing,
        "micro_batch": micro_batch,
        "log": str(log),
    }
    argv = fit_argv(config, run_dir, checkpointing, micro_batch, options, variant)
    start = time.perf_counter()
    try:
        with log.open("w") as handle:
            done = subprocess.run(
                argv, check=False, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, timeout=options.run_timeout
            )
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    record["wall_seconds"] = round(time.perf_counter() - start, 1)
    text = log.read_text(errors="replace")
    if code != 0:
        record["status"] = "out of memory" if any(word in text for word in OUT_OF_MEMORY) else f"failed ({code})"
        record["last_lines"] = text.strip().splitlines()[-3:]
        return record
    logged = logged_csv_metrics(run_dir, "perf/")
    timed = [values for step, values in sorted(logged.items()) if step >= options.warmup]
    rates = [values["perf/tokens_per_s"] for values in timed if "perf/tokens_per_s" in values]
    if not rates:
        record["status"] = "failed (no throughput logged)"
        return record
    record["status"] = "ok"
    record["timed_steps"] = len(rates)
    record["tokens_per_s"] = statistics.median(rates)
    mfu = [values["perf/mfu"] for values in timed if "perf/mfu" in values]
    record["mfu"] = statistics.median(mfu) if mfu else None
    memory = [values["perf/peak_memory_gib"] for values in timed if "perf/peak_memory_gib" in values]
    record["peak_memory_gib"] = max(memory) if memory else None
    return record


def setting_of(record: dict) -> tuple[str, str, int]:
    """(variant, activation checkpointing, micro batch) of a run: what RoPE and REPO are paired on."""
    return record.get("variant", "eager"), str(record["activation_checkpointing"]).lower(), record["micro_batch"]


def markdown(records: list[dict], options) -> str:
    """The report's table: one row a run; then the REPO/RoPE step-time ratio of each setting that ran both, and
    each variant's tokens/s against the eager engine's at the same setting."""
    lines = [
        f"`python -m repo_train fit`, {options.steps} optimizer steps of {options.accumulation} micro batches "
        f"({options.warmup} dropped), configs {options.rope_config} / {options.repo_config}"
        + (f", extra: `{options.fit_args}`" if options.fit_args else ""),
        "",
        "| variant | method | act. ckpt | micro batch | status | tokens/s | MFU | peak GiB | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        ok = r["status"] == "ok"
        lines.append(
            f"| {r.get('variant', 'eager')} | {r['method']} | {r['activation_checkpointing']} | "
            f"{r['micro_batch']} | {r['status']} | "
            + (f"{r['tokens_per_s']:,.0f} | " if ok else "| ")
            + (f"{r['mfu']:.1%} | " if ok and r.get("mfu") is not None else "| ")
            + (f"{r['peak_memory_gib']:.1f} | " if ok and r.get("peak_memory_gib") is not None else "| ")
            + f"{r['wall_seconds']} |"
        )
    lines += ["", "| variant | act. ckpt | micro batch | REPO/RoPE step time (median of rounds) |", "|---|---|---|---|"]
    for (variant, checkpointing, micro), ratio in ratios(records).items():
        lines.append(f"| {variant} | {checkpointing} | {micro} | {ratio:.4f} |")
    speedups = speed_ups(records)
    if speedups:
        lines += ["", "| variant | method | act. ckpt | micro batch | tokens/s / eager's |", "|---|---|---|---|---|"]
        for (variant, method, checkpointing, micro), ratio in speedups.items():
            lines.append(f"| {variant} | {method} | {checkpointing} | {micro} | {ratio:.3f} |")
    return "\n".join(lines) + "\n"


def ratios(records: list[dict]) -> dict[tuple[str, str, int], float]:
    """(variant, checkpointing, micro batch) -> median over rounds of RoPE tokens/s / REPO tokens/s (REPO's
    relative time)."""
    paired: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for r in records:
        if r["status"] == "ok":
            paired.setdefault(setting_of(r), {"rope": [], "repo": []})[r["method"]].append(r["tokens_per_s"])
    return {
        key: statistics.median(rope / repo for rope, repo in zip(runs["rope"], runs["repo"]))
        for key, runs in paired.items()
        if runs["rope"] and runs["repo"]
    }


def speed_ups(records: list[dict]) -> dict[tuple[str, str, str, int], float]:
    """(variant, method, checkpointing, micro batch) -> median tokens/s of the variant / the eager engine's at
    the same setting, for each variant other than eager that was measured at that setting too."""
    rates: dict[tuple[str, str, str, int], list[float]] = {}
    for r in records:
        if r["status"] == "ok":
            variant, checkpointing, micro = setting_of(r)
            rates.setdefault((variant, r["method"], checkpointing, micro), []).append(r["tokens_per_s"])
    return {
        key: statistics.median(values) / statistics.median(rates[("eager", *key[1:])])
        for key, values in rates.items()
        if key[0] != "eager" and ("eager", *key[1:]) in rates
    }


def run(parsed: Namespace, parser: ConfigParser) -> int:
    options = dataclass_config(parsed, FitBenchmark)
    check_output_directory(options.out, MANIFEST, "a fit benchmark's output")
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = {"rope": options.rope_config, "repo": options.repo_config}
    records: list[dict] = []

    def save() -> None:  # after every run, so a stopped benchmark keeps what it measured
        write_json_atomic(out / MANIFEST, {"command": PROG, "options": options.options(), "runs": records})
        write_text_atomic(out / "report.md", markdown(records, options))

    for checkpointing in options.checkpointing_list:
        failed: set[str] = set()  # variants that failed at a smaller micro batch: a larger one will not fit either
        for micro_batch in options.micro_batch_list:
            for round_index in range(options.rounds):
                for variant in options.variant_list:  # alternating: drift in the machine hits every variant alike
                    if variant in failed:
                        continue
                    for method, config in configs.items():
                        name = f"{variant}-ckpt-{str(checkpointing).lower()}-mb{micro_batch}-{method}-r{round_index}"
                        record = run_once(method, config, checkpointing, micro_batch, out / name, options, variant)
                        records.append(record)
                        save()
                        shown = f"{record.get('tokens_per_s', 0):,.0f} tok/s" if record["status"] == "ok" else ""
                        print(
                            f"[benchmark-fit] {name}: {record['status']} {shown} ({record['wall_seconds']} s)",
                            flush=True,
                        )
                        if record["status"] != "ok":
                            failed.add(variant)
            if len(failed) == len(options.variant_list):
                break
    print(markdown(records, options), end="")
    return 0 if records and all(r["status"] == "ok" or r["status"] == "out of memory" for r in records) else 1
