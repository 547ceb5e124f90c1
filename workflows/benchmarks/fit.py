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
from pathlib import Path

from jsonargparse import Namespace
from jsonargparse.typing import NonNegativeInt, PositiveInt

from repo_common.atomic import write_json_atomic, write_text_atomic
from repo_common.config_cli import ConfigParser, script_options
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


def add_arguments(parser: ConfigParser) -> None:
    """The benchmark's options (each also a key of a `--config` file)."""
    parser.description = __doc__
    parser.add_argument("--out", type=str, default="outputs/benchmark-fit", help="report and run logs")
    parser.add_argument("--rope_config", type=str, default=CONFIGS["rope"], help="the RoPE run's fit config")
    parser.add_argument("--repo_config", type=str, default=CONFIGS["repo"], help="the REPO run's fit config")
    parser.add_argument("--micro_batches", type=str, default="4", help="comma-separated micro batch sizes, ascending")
    parser.add_argument("--activation_checkpointing", type=str, default="false,true",
                        help="comma-separated settings of model.activation_checkpointing "
                             "(false, true, every_K, attention, mlp)")  # fmt: skip
    parser.add_argument("--switches", type=str, default="eager",
                        help="comma-separated engine variants, each 'eager' or switches joined by '+' "
                             f"({', '.join(SWITCHES)}), e.g. eager,compile,compile+chunked_loss")  # fmt: skip
    parser.add_argument("--steps", type=PositiveInt, default=12, help="optimizer steps per run")
    parser.add_argument("--warmup", type=NonNegativeInt, default=3, help="first optimizer steps not counted")
    parser.add_argument("--accumulation", type=PositiveInt, default=4, help="micro batches per optimizer step")
    parser.add_argument("--rounds", type=PositiveInt, default=1, help="RoPE/REPO pairs per setting")
    parser.add_argument("--run_timeout", type=PositiveInt, default=300, help="seconds before one run is stopped")
    parser.add_argument("--fit_args", type=str, default="",
                        help="more `fit` overrides for every run, space-separated (e.g. a CPU rehearsal's "
                             "'--trainer.accelerator cpu --model.preset_name tiny')")  # fmt: skip


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


def check_options(options) -> None:
    """The lists parsed, the configs present, `--out` writable (a ValueError is the one-line refusal)."""
    options.micro_batch_list = _split(options.micro_batches, "--micro_batches", int)
    if any(size < 1 for size in options.micro_batch_list) or options.micro_batch_list != sorted(
        options.micro_batch_list
    ):
        raise ValueError(f"--micro_batches {options.micro_batches!r}: give positive sizes in ascending order")
    options.checkpointing_list = _split(options.activation_checkpointing, "--activation_checkpointing", _checkpointing)
    options.variant_list = _split(options.switches, "--switches", _variant)
    if options.warmup >= options.steps:
        raise ValueError(f"--warmup {options.warmup} leaves no timed step of --steps {options.steps}: lower it")
    for option in ("rope_config", "repo_config"):
        if not Path(getattr(options, option)).is_file():
            raise ValueError(f"--{option} {getattr(options, option)}: no such file; pass a fit config (YAML)")
    check_output_directory(options.out, MANIFEST, "a fit benchmark's output")


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
    record = {"method": method, "variant": variant, "activation_checkpointing": checkpointing,
              "micro_batch": micro_batch, "log": str(log)}  # fmt: skip
    argv = fit_argv(config, run_dir, checkpointing, micro_batch, options, variant)
    start = time.perf_counter()
    try:
        with log.open("w") as handle:
            done = subprocess.run(argv, check=False,
                                  cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, timeout=options.run_timeout)  # fmt: skip
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
    lines = [f"`python -m repo_train fit`, {options.steps} optimizer steps of {options.accumulation} micro batches "
             f"({options.warmup} dropped), configs {options.rope_config} / {options.repo_config}"
             + (f", extra: `{options.fit_args}`" if options.fit_args else ""), "",
             "| variant | method | act. ckpt | micro batch | status | tokens/s | MFU | peak GiB | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in records:
        ok = r["status"] == "ok"
        lines.append(f"| {r.get('variant', 'eager')} | {r['method']} | {r['activation_checkpointing']} | "
                     f"{r['micro_batch']} | {r['status']} | "
                     + (f"{r['tokens_per_s']:,.0f} | " if ok else "| ")
                     + (f"{r['mfu']:.1%} | " if ok and r.get("mfu") is not None else "| ")
                     + (f"{r['peak_memory_gib']:.1f} | " if ok and r.get("peak_memory_gib") is not None else "| ")
                     + f"{r['wall_seconds']} |")  # fmt: skip
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
    return {key: statistics.median(rope / repo for rope, repo in zip(runs["rope"], runs["repo"]))
            for key, runs in paired.items() if runs["rope"] and runs["repo"]}  # fmt: skip


def speed_ups(records: list[dict]) -> dict[tuple[str, str, str, int], float]:
    """(variant, method, checkpointing, micro batch) -> median tokens/s of the variant / the eager engine's at
    the same setting, for each variant other than eager that was measured at that setting too."""
    rates: dict[tuple[str, str, str, int], list[float]] = {}
    for r in records:
        if r["status"] == "ok":
            variant, checkpointing, micro = setting_of(r)
            rates.setdefault((variant, r["method"], checkpointing, micro), []).append(r["tokens_per_s"])
    return {key: statistics.median(values) / statistics.median(rates[("eager", *key[1:])])
            for key, values in rates.items() if key[0] != "eager" and ("eager", *key[1:]) in rates}  # fmt: skip


def run(parsed: Namespace, parser: ConfigParser) -> int:
    options = script_options(parser, parsed, check_options)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = {"rope": options.rope_config, "repo": options.repo_config}
    records: list[dict] = []

    def save() -> None:  # after every run, so a stopped benchmark keeps what it measured
        write_json_atomic(out / MANIFEST, {"command": PROG, "options": {k: v for k, v in vars(options).items()
                                           if not k.endswith("_list")}, "runs": records})  # fmt: skip
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
                        print(f"[benchmark-fit] {name}: {record['status']} {shown} ({record['wall_seconds']} s)",
                              flush=True)  # fmt: skip
                        if record["status"] != "ok":
                            failed.add(variant)
            if len(failed) == len(options.variant_list):
                break
    print(markdown(records, options), end="")
    return 0 if records and all(r["status"] == "ok" or r["status"] == "out of memory" for r in records) else 1
