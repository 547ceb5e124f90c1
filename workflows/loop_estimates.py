"""Hours of a full-scale loop's search and evaluations, for its dry run: estimates from the job pages' figures.

A researcher reads the dry run before spending GPU-hours, so each step states
what it will cost. Training's memory and hours are `fit`'s own plan
(`repo_train.training.plan`: a memory model and measured throughput); the
rest is worked out the way the job pages do:

- evaluation and search (docs/evaluation.md, "Expected time and memory"): per prompt a prefill of
  F = 2·N_body·T + 4·L·d·T² FLOPs at an assumed 35% MFU, plus decoding at an assumed 25 ms per step,
  32 steps per batch of 8; T from the measured mean prompt lengths of the tasks; a method's extra
  forwards multiply both (PCD 2, Attention Buckets 6, Found in the Middle K + 2 prefills); the search
  evaluates population × (generations + 1) genomes at most (its cache only lowers this) on
  3 positions per example, then its held-out check scores 3 variants.

Each estimate divides by the step's GPUs (the harness and the search share prompts across ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from repo_train.modeling.methods import resolve_position
from repo_train.modeling.presets import preset

#: H100 SXM dense bf16 peak, TFLOP/s (the train configs' throughput.peak_tflops_per_device).
PEAK_TFLOPS = 989.0
INFERENCE_MFU = 0.35
#: Decoding: seconds per step, steps per batch, prompts per batch (docs/evaluation.md).
DECODE_STEP_S, DECODE_STEPS, DECODE_BATCH = 0.025, 32, 8
#: Mean prompt tokens per item and fixed overhead, from the measured lengths (Llama-2 tokenizer):
#: MDQA 20 documents 2,751 tokens; KV 50 pairs 3,626, 75 pairs 5,407.
#: mdqa_release: taken as mdqa's (both are 100-word Wikipedia passages in the same prompt; not measured).
TOKENS_PER_ITEM = {"mdqa": (137.5, 1.0), "mdqa_release": (137.5, 1.0), "kv": (71.2, 66.0)}
#: Forward passes a method costs relative to the baseline (prefill, decode); fim: K + 2 prefills.
METHOD_COST = {"pcd": (2, 2), "attention_buckets": (6, 6)}
#: Gold positions of the named grids (five each); "all" = every item.
GRID_POSITIONS = {"ends-20-50-80": 5, "quartiles": 5}


def _preset(train_config: dict):
    model = train_config.get("model") or {}
    name = model.get("preset_name")
    if name is None:
        return None
    return preset(name, **resolve_position(model.get("position", "repo")).model_config_fields())


def option(args: Sequence[str], flag: str, value):
    """The value of `flag` in a LightningCLI argument list (`--a.b V` or `--a.b=V`), else `value`."""
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return value


def prompt_seconds(model, task: str, items: int) -> float | None:
    """One baseline prompt on one GPU: prefill FLOPs at INFERENCE_MFU plus its share of a batch's decoding."""
    if task not in TOKENS_PER_ITEM:
        return None
    per_item, overhead = TOKENS_PER_ITEM[task]
    tokens = per_item * items + overhead
    d, layers = model.hidden_size, model.num_hidden_layers
    kv = model.num_key_value_heads * (d // model.num_attention_heads)
    body = layers * (2 * d * d + 2 * d * kv + 3 * d * model.intermediate_size)
    flops = 2 * body * tokens + 4 * layers * d * tokens**2
    return flops / (INFERENCE_MFU * PEAK_TFLOPS * 1e12) + DECODE_STEPS * DECODE_STEP_S / DECODE_BATCH


def method_cost(spec: str, items: int) -> float:
    """Forward passes of a method stack relative to the baseline (prefill-weighted; fim: K + 2 prefills)."""
    cost = 1.0
    for part in spec.split("+"):
        name = part.split(":")[0]
        if name == "fim":
            cost *= items + 2
        elif name in METHOD_COST:
            cost *= METHOD_COST[name][0]
    return cost


def evaluation_hours(
    model, tasks: Sequence[str], items: dict[str, int], examples: int, positions: str, methods: Sequence[str], gpus
) -> tuple[float, str] | None:
    """(hours, how) of an evaluation run; None when a task's prompt length is not known here."""
    seconds, prompts = 0.0, 0
    for task in tasks:
        per_prompt = prompt_seconds(model, task, items.get(task, 0))
        if per_prompt is None:
            return None
        count = examples * positions_count(positions, items[task])
        prompts += count * len(methods)
        seconds += sum(count * per_prompt * method_cost(method, items[task]) for method in methods)
    return seconds / gpus / 3600, f"{prompts:,} prompts"


def search_hours(model, search_config, gpus: int) -> tuple[float, str] | None:
    """(hours, how) of an LPES search at most (genomes the cache knows are not scored again)."""
    task = search_config.task
    per_prompt = prompt_seconds(model, task.name, task.num_items)
    if per_prompt is None:
        return None
    ga = search_config.ga
    genomes = ga.population * (ga.generations + 1)
    prompts = genomes * task.num_examples * 3 + 3 * search_config.held_out.num_examples * 3
    return prompts * per_prompt / gpus / 3600, f"≤ {genomes} genomes, ≤ {prompts:,} prompts"


def evaluation_shape(args: Sequence[str]) -> tuple[list[str], dict[str, int], int, str]:
    """(tasks, items per task, examples, gold-position grid) from an evaluation's short-form options."""

    def value(flag: str, default: str) -> str:
        return str(option(args, flag, default))

    tasks = [t.strip() for t in value("--tasks", "mdqa").split(",") if t.strip()]
    documents = int(value("--num_documents", "20"))
    items = {"mdqa": documents, "mdqa_release": documents, "kv": int(value("--num_keys", "75"))}
    return tasks, items, int(value("--num_examples", "500")), value("--gold_positions", "ends-20-50-80")


def positions_count(grid: str, items: int) -> int:
    """Gold positions of a grid name ("all": every item) or an explicit comma list."""
    if grid == "all":
        return items
    if grid in GRID_POSITIONS:
        return GRID_POSITIONS[grid]
    return len([p for p in grid.split(",") if p.strip()])


def model_shape(train_config: str | Path):
    """The model config a train config's preset describes (None when it names none): the shape estimated."""
    return _preset(yaml.safe_load(Path(train_config).read_text()) or {})


def described(estimate: tuple[float, str] | None) -> str:
    """An estimate as the plan prints it."""
    if estimate is None:
        return "time unknown (no model preset or prompt length for it)"
    hours, how = estimate
    return f"≈ {hours:.1f} h ({how})" if hours >= 0.1 else f"≈ {hours * 60:.0f} min ({how})"
