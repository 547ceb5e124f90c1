"""The evaluation harness on the device decodes what it decodes on the CPU: same greedy tokens, same records.

A tiny random OLMo-2 (the harness's built-in default, sharpened so greedy
choices have margins far above float32 noise, see SEED) runs a small generated KV task
in fp32, once on the CPU and once on the device, through the harness's own
pipeline: the task's prompts as `evaluation.runner.prepare` builds and
plans them, decoded by `evaluation.generation.generate`; and the whole
`evaluation.runner.run` (records, scores) into two output directories.
"""

from __future__ import annotations

from pathlib import Path

from evaluation.generation import generate
from evaluation.model_loading import place_model, tiny_default
from evaluation.results import RECORDS_FILE, read_records
from evaluation.runner import RunConfig, prepare, run
from workflows.gpu_check.positions import fp32_matmul, sharpen
from workflows.gpu_check.rows import FAIL, PASS, Row

#: A generated KV task small enough for seconds on a CPU: 3 examples × 3 gold positions, 8 UUID pairs each.
TASK = "kv"
TASK_PARAMS = {"num_keys": 8, "num_examples": 3, "gold_positions": [0, 4, 7], "seed": 0}
MAX_NEW_TOKENS = 12
#: The tiny default's seed and the factor on its 2-D weights. Measured on the CPU: 2-6 distinct tokens per prompt
#: (other seeds and factors mostly repeat one token) and greedy margins >= 8e-4 of max |logit|, several hundred times
#: the fp32 drift between two devices' kernels (~1e-6), so a differing token is a bug, not a near-tie.
SEED, SHARPEN = 1, 2.0
#: Fields of a record that must be equal on both devices.
RECORD_FIELDS = ("prediction", "score", "stop_reason", "prompt_tokens")


def sharpened_tiny_default():
    """The harness's tiny default model (SEED) and byte tokenizer, its 2-D weights × SHARPEN."""
    model, tokenizer = tiny_default(SEED)
    return sharpen(model, SHARPEN), tokenizer


def harness_tokens(device: str) -> list[list[int]]:
    """Greedy token ids of every prompt of the task, decoded in fp32 on `device` by the harness."""
    model, tokenizer = sharpened_tiny_default()
    model = place_model(model, device)
    config = RunConfig(out="-", tasks={TASK: TASK_PARAMS}, max_new_tokens=MAX_NEW_TOKENS, batch_size=4)
    (task,) = config.tasks
    prepared = prepare(task, model, tokenizer, config.settings(task))
    with fp32_matmul():
        return [output.token_ids for output in generate(model, tokenizer, prepared.prompts, prepared.settings)]


def harness_records(device: str, out: Path) -> dict[str, dict]:
    """`evaluation.runner.run` of the task on `device` into `out`: record id -> record."""
    model, tokenizer = sharpened_tiny_default()
    config = RunConfig(out=str(out), tasks={TASK: TASK_PARAMS}, max_new_tokens=MAX_NEW_TOKENS, batch_size=4,
                       device=device, bootstrap_resamples=10)  # fmt: skip
    with fp32_matmul():
        run(config, model=place_model(model, device), tokenizer=tokenizer, progress=False)
    return {record["id"]: record for record in read_records(Path(out) / RECORDS_FILE)}


def tokens_row(device: str, reference_device: str = "cpu") -> Row:
    """Greedy tokens on `device` equal those on `reference_device`, prompt for prompt."""
    name = f"harness: greedy tokens {device} vs {reference_device}"
    return compare_tokens(name, harness_tokens(device), harness_tokens(reference_device))


def compare_tokens(name: str, candidate: list[list[int]], reference: list[list[int]]) -> Row:
    """Passes when both lists hold the same token ids for every prompt (and there is at least one)."""
    same = sum(a == b for a, b in zip(candidate, reference))
    differing = [i for i, (a, b) in enumerate(zip(candidate, reference)) if a != b]
    note = f"{sum(len(tokens) for tokens in reference)} tokens in fp32"
    note += f"; first differing prompt {differing[0]}" if differing else ""
    ok = same == len(reference) == len(candidate) > 0
    return Row(name, PASS if ok else FAIL, f"{same}/{len(reference)} prompts equal", "all equal", note)


def records_row(device: str, workdir: Path, reference_device: str = "cpu") -> Row:
    """`evaluation.runner.run` writes the same records (prediction, score, stop reason) on both devices."""
    candidate = harness_records(device, Path(workdir) / f"harness-{device}")
    reference = harness_records(reference_device, Path(workdir) / f"harness-{reference_device}-reference")
    return compare_records(f"harness: runner records {device} vs {reference_device}", candidate, reference)


def compare_records(name: str, candidate: dict[str, dict], reference: dict[str, dict]) -> Row:
    """Passes when both runs wrote the same record ids with equal RECORD_FIELDS."""
    same = [key for key, record in reference.items()
            if key in candidate and all(candidate[key][f] == record[f] for f in RECORD_FIELDS)]  # fmt: skip
    ok = len(same) == len(reference) == len(candidate) > 0
    return Row(name, PASS if ok else FAIL, f"{len(same)}/{len(reference)} records equal", "all equal",
               f"{TASK} task, fields {', '.join(RECORD_FIELDS)}")  # fmt: skip


def harness_rows(device: str, workdir: Path) -> list[Row]:
    return [tokens_row(device), records_row(device, workdir)]
