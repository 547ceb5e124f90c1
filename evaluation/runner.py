"""Run a grid of tasks × method stacks: per-example records as produced, resumable, then a summary.

Order and resumption: each task's prompts are tokenised once, length-checked
and split into batches by one deterministic plan; every method stack walks the
same plan. On a restart, ids already in `records.jsonl` for that (task, method)
are skipped, and a batch with missing ids is regenerated *whole* (batch
companions change padding, hence floating-point sums), writing only the
missing records. So an interrupted-and-resumed run writes the same bytes as an
uninterrupted one.

Tokenised, length-checked prompts are cached in memory, keyed by (tokenizer
fingerprint, task name + parameters, length budget, truncation): every method
stack of a grid, and every later call in the same process (a search scoring
many candidates), reuses them; a new process tokenises again, which is cheap
next to generation. Tokenising runs a chunk of prompts at a time, and prompts
that do not fit are only counted, so refusing an impossible task (say 37,500
KV prompts of 6,000 tokens for a 2,048-token model) takes the memory of one
chunk, not of every prompt's tokens and offsets.

`OUT/run.json` records what the records depend on (model, its weight files,
tokenizer, the files methods read, task parameters and metrics, decoding);
resuming into a directory made with other settings is refused rather than
mixed, and so are records without a run.json and a directory of other files
(`repo_common.output_guard`). Methods and tasks may be added to an existing
directory.

Decoding defaults come from the task's `generation_defaults()`. Tasks declaring `scoring = "loglikelihood"` (multiple
choice) generate nothing: each row's options are scored by `evaluation.loglik`
and the task picks one; only methods acting through attach/detach (position
policies) apply there. `RunConfig.score = "gold_loglik"` (`--score`) teacher-forces each generation
row's gold answer through the method stack instead (`score_continuations`): the record's score is its
mean log-probability per token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import datasets

from evaluation.generation import batch_cost, plan_batches, prompt_limit, token_lengths, tokenize_and_fit
from evaluation.loglik import continuation_scores
from evaluation.methods import GenerationBatch, MethodStack
from evaluation.methods.base import refuse_generation_hooks
from evaluation.methods.decoding import DecodeSettings, TokenizedPrompt, collate, generate_batch, score_continuations
from evaluation.model_identity import model_identity
from evaluation.model_loading import (
    file_identity,
    load_model,
    place_model,
    resolve_dtype,
    tiny_default,
    weights_identity,
)
from evaluation.prompt_format import PromptFormat, chat_template_notice
from evaluation.results import (
    FORMAT_VERSION,
    RECORDS_FILE,
    SUMMARY_FILE,
    RecordWriter,
    build_summary,
    merge_rank_records,
    rank_records_file,
    rank_records_files,
    read_records,
    write_json_atomic,
)
from evaluation.run_config import GOLD_LOGLIK, RunConfig, check_tiny_default_options, task_params
from evaluation.run_directory import MANIFEST_FILE, check_run_directory
from evaluation.scale_file_model import check_scale_file_models
from evaluation.search_overlap import check_disjoint
from evaluation.tasks import Task, build_task
from evaluation.tasks.base import RENAMED_GRIDS, source_fingerprint
from repo_common.atomic import write_text_atomic
from repo_common.distributed import balanced_shares, barrier, rank_and_world
from repo_common.progress import track
from repo_common.run_lock import locked_directory

#: The resolved configuration of the latest command that ran into the directory (`--config` replays it).
CONFIG_FILE = "config.yaml"

#: Generation time to collect before scoring it in one call: an `evaluate` compute costs ~10-30 ms whatever its size,
#: which made a tiny model's run 1.5x slower when called per batch of 8; one call per second of generation costs a
#: few percent at most, and a kill loses at most that second of generated answers.
SCORE_EVERY_SECONDS = 1.0
#: Columns a prepared row keeps (the prompt and its item spans live on as tokens: `PreparedTask.prompts`).
_ROW_COLUMNS = ("id", "example_id", "gold_position", "num_positions", "answers")
#: Extra columns of tasks scored by log-likelihood (`scoring = "loglikelihood"`): the context and its options.
_LOGLIK_COLUMNS = ("prompt", "choices")
#: What methods may see of a row (`GenerationBatch.rows`): never the answer or where it is.
_PUBLIC_COLUMNS = ("id", "example_id", "num_positions")


class RunInterrupted(RuntimeError):
    """The run stopped early on purpose (`max_records`); rerunning the same command resumes it."""


def task_generation(name: str, params: Mapping[str, Any]) -> tuple[int, tuple[str, ...]]:
    """(max_new_tokens, stop strings) of a task when the run does not set them: `Task.generation_defaults`."""
    return build_task(name, **params).generation_defaults()


def scores_by_loglikelihood(task: Task) -> bool:
    """True for tasks that declare `scoring = "loglikelihood"` (their rows carry `choices`)."""
    return task.scoring == "loglikelihood"


@dataclass
class PreparedTask:
    """A task ready to run: its rows, fitted token prompts and the batch plan every method follows."""

    name: str
    task: Task
    rows: list[dict[str, Any]]
    prompts: list[TokenizedPrompt]
    settings: DecodeSettings
    plan: list[list[int]]
    texts: Sequence[str] = ()
    """The exact strings that were tokenised (chat-templated when the run asks for it), row by row."""
    add_special_tokens: bool = True
    """Whether tokenising `texts` added the tokenizer's special tokens (not for a rendered chat template)."""
    source: datasets.Dataset | None = None
    """The task's built dataset (every column; `rows` keep only what decoding needs)."""
    chat_template: bool = False
    """Whether `texts` are chat-templated (the gold continuation then starts the assistant's turn)."""
    score: str = "metric"
    """metric: the task's metric of each greedy answer; gold_loglik: the gold answer teacher-forced (`RunConfig`)."""

    def source_fingerprints(self) -> set[str]:
        """Its source examples by content (`evaluation.tasks.base.source_fingerprint`), one row read per example."""
        kept = {row["example_id"] for row in self.rows}
        if self.source is None:
            raise ValueError(f"task {self.name!r} was prepared without its dataset: no fingerprints")
        fingerprints, seen = set(), set()
        for row in self.source:
            if row["example_id"] in kept and row["example_id"] not in seen:
                seen.add(row["example_id"])
                fingerprints.add(source_fingerprint(row))
        return fingerprints


_DATASETS: dict[str, datasets.Dataset] = {}
_TOKENS_CACHE: dict[tuple[str, str, int | None, str | None], list[TokenizedPrompt]] = {}


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's full definition (fast tokenizers) or its name and size."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else f"{tokenizer.name_or_path}:{len(tokenizer)}"
    text += f"|{type(tokenizer).__name__}|{tokenizer.bos_token}|{tokenizer.eos_token}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _takes_tokenizer(task: Task) -> bool:
    """True for tasks with a `tokenizer` field (RULER, bAbI, LongBench's length filter)."""
    return any(f.name == "tokenizer" for f in fields(task))


def prepare_task(
    name: str,
    params: Mapping[str, Any],
    model,
    tokenizer,
    settings: DecodeSettings,
    prompt_format: PromptFormat | None = None,
) -> PreparedTask:
    """`prepare` of the task registered as `name`, configured with `params` (`build_task`)."""
    return prepare(build_task(name, **params), model, tokenizer, settings, prompt_format)


def prepare(
    task: Task,
    model,
    tokenizer,
    settings: DecodeSettings,
    prompt_format: PromptFormat | None = None,
) -> PreparedTask:
    """Build, format, tokenise (cached in memory by tokenizer, task parameters, format and length budget),
    length-check, plan.

    `prompt_format` (default: prompts as they are) may wrap each prompt in the
    tokenizer's chat template; lengths, length checks and item spans are then
    those of the templated text (`evaluation.prompt_format`).

    Tokenising and the length check run in bounded memory (`tokenize_and_fit`:
    chunks of prompts read from the task's dataset, the prompts that do not fit
    counted by length only), so a task whose prompts exceed the budget is
    refused before anything of it is kept.
    """
    name, params = task.name, task_params(task)
    injected = _takes_tokenizer(task) and task.tokenizer is None
    if injected:  # tasks that measure lengths in tokens use the evaluated model's own tokenizer
        task = dataclasses.replace(task, tokenizer=tokenizer)
    given = None if injected or not _takes_tokenizer(task) else str(task.tokenizer)
    kind = f"{type(task).__module__}.{type(task).__qualname__}"  # a user's class may share a built-in's name
    key_parts = {
        "task": name,
        "class": kind,
        **params,
        "tokenizer": tokenizer_fingerprint(tokenizer) if injected else given,
    }
    key = json.dumps(key_parts, sort_keys=True, default=str)
    prompt_format = prompt_format or PromptFormat()
    limit = prompt_limit(model, settings)
    if key not in _DATASETS:
        if settings.truncate is None and limit is not None:
            refuse_if_first_prompt_too_long(name, task, tokenizer, prompt_format, limit)
        _DATASETS[key] = task.build()
    dataset = _DATASETS[key]
    if len(dataset) == 0:
        raise ValueError(f"task {name!r} built no rows with {dict(params)}; check num_examples and the data file")
    if prompt_format.chat_template and scores_by_loglikelihood(task):
        raise ValueError(
            f"task {name!r} is scored by log-likelihood, which reads the raw context; --chat_template applies to "
            "generation tasks only: evaluate this task in a run without it"
        )
    texts, spans = dataset["prompt"], dataset["item_spans"]  # lazy columns: read a chunk at a time below
    if prompt_format.chat_template:
        texts, spans = prompt_format.apply(tokenizer, texts, spans)
    described = json.dumps(prompt_format.describe(tokenizer), sort_keys=True)
    token_key = (tokenizer_fingerprint(tokenizer), key, limit, settings.truncate, described)
    if token_key not in _TOKENS_CACHE:
        _TOKENS_CACHE[token_key] = tokenize_and_fit(
            tokenizer, texts, spans, limit, settings.truncate, add_special_tokens=prompt_format.add_special_tokens
        )
    fitted = _TOKENS_CACHE[token_key]
    vocab = getattr(model.config, "vocab_size", None)
    highest = max((max(p.input_ids) for p in fitted if p.input_ids), default=-1)
    if isinstance(vocab, int) and highest >= vocab:
        raise ValueError(
            f"task {name!r}: its prompts use token id {highest}, past the model's vocabulary of {vocab} (a token "
            "the tokenizer added after the model was made); use the model's own tokenizer, or resize its embeddings"
        )
    columns = list(_ROW_COLUMNS) + (list(_LOGLIK_COLUMNS) if scores_by_loglikelihood(task) else [])
    rows = dataset.select_columns(columns).to_list()
    plan = plan_batches([len(p.input_ids) for p in fitted], settings.batch_size)
    return PreparedTask(
        name, task, rows, fitted, settings, plan, texts, prompt_format.add_special_tokens, dataset,
        prompt_format.chat_template,
    )  # fmt: skip


def refuse_if_first_prompt_too_long(name: str, task: Task, tokenizer, prompt_format: PromptFormat, limit: int) -> None:
    """Tokenise the task's first prompt before building the rest: when it already exceeds the limit, the grid is
    refused in seconds with its numbers (the prompts of a task are about as long as each other), not after
    building and counting every prompt of a grid that may hold millions of tokens."""
    first = next(iter(task.rows()), None)
    if first is None:
        return
    texts, _ = prompt_format.apply(tokenizer, [first["prompt"]], [first.get("item_spans") or []])
    length = next(token_lengths(tokenizer, texts, add_special_tokens=prompt_format.add_special_tokens))
    if length > limit:
        raise ValueError(
            f"task {name!r}: its first prompt has {length} tokens, so its prompts exceed the {limit}-token prompt "
            "limit (--max_length, else the model's max_position_embeddings, minus --max_new_tokens); use fewer items "
            "per prompt (--num_keys / --num_documents), raise --max_length, or pass --truncate middle|left"
        )


def run_stack(
    model,
    tokenizer,
    prepared: PreparedTask,
    stack: MethodStack,
    done: Mapping[str, Any] | set[str] = frozenset(),
    progress: bool | str = False,
) -> Iterator[dict[str, Any]]:
    """Records of one method stack on one prepared task, in plan order, skipping ids in `done`.

    `progress`: True = a bar on a terminal, else lines in a log; False = lines only; "off" = silent
    (`repo_common.progress`)."""
    todo = [batch for batch in prepared.plan if any(prepared.rows[i]["id"] not in done for i in batch)]
    if not todo:
        return
    if scores_by_loglikelihood(prepared.task):
        yield from _loglikelihood_records(model, tokenizer, prepared, stack, todo, done, progress)
        return
    if prepared.score == GOLD_LOGLIK:
        yield from _gold_loglik_records(model, tokenizer, prepared, stack, todo, done, progress)
        return
    label = stack.label
    with stack.attached(model, tokenizer):
        bar = track(todo, f"{prepared.name} / {label}", unit="batch", mode=progress)
        pending, since = [], time.monotonic()
        for indices in bar:
            rows, batch = _collated(prepared, indices, tokenizer.pad_token_id, model.device)
            outputs = generate_batch(model, tokenizer, batch, prepared.settings, stack)
            pending += [(row, output) for row, output in zip(rows, outputs) if row["id"] not in done]
            if time.monotonic() - since >= SCORE_EVERY_SECONDS:
                yield from _scored(prepared, label, pending)
                pending, since = [], time.monotonic()
        yield from _scored(prepared, label, pending)


def _collated(
    prepared: PreparedTask, indices: Sequence[int], pad_id: int, device
) -> tuple[list[dict], GenerationBatch]:
    """The rows of one planned batch and their left-padded batch; methods see only `_PUBLIC_COLUMNS` of each row
    (no answers, no gold position)."""
    rows = [prepared.rows[i] for i in indices]
    public = [{key: row[key] for key in _PUBLIC_COLUMNS} for row in rows]
    return rows, collate([prepared.prompts[i] for i in indices], pad_id, device, public)


def _scored(prepared: PreparedTask, method: str, pending: list) -> Iterator[dict[str, Any]]:
    """Records of generated (row, output) pairs, scored in one `Task.score_batch` call."""
    if not pending:
        return
    scores = prepared.task.score_batch([output.text for _, output in pending], [row["answers"] for row, _ in pending])
    for (row, output), score in zip(pending, scores, strict=True):
        yield _record(prepared, method, row, output.text, score, output.prompt_tokens, output.truncated,
                      output.stop_reason)  # fmt: skip


def _record(prepared: PreparedTask, method: str, row, prediction: str, score: float, prompt_tokens: int,
            truncated: bool, stop_reason: str) -> dict[str, Any]:  # fmt: skip
    """One line of records.jsonl: the row's identity, the prediction and its score."""
    return {
        "id": row["id"],
        "example_id": row["example_id"],
        "task": prepared.name,
        "method": method,
        "gold_position": row["gold_position"],
        "num_positions": row["num_positions"],
        "prediction": prediction,
        "answers": row["answers"],
        "score": score,
        "prompt_tokens": prompt_tokens,
        "truncated": truncated,
        "stop_reason": stop_reason,
    }


def _loglikelihood_records(model, tokenizer, prepared: PreparedTask, stack: MethodStack, todo, done, progress):
    """Records of a log-likelihood task: each row's options scored in one batch, the task picks one.

    Only methods that act through attach/detach (position policies) apply here; a method with
    generation hooks would silently do nothing, so it is refused.
    """
    refuse_generation_hooks(stack, prepared.name)
    label, task = stack.label, prepared.task
    use_cache = bool(task.use_kv_cache)
    with stack.attached(model, tokenizer):
        bar = track(todo, f"{prepared.name} / {label}", unit="batch", mode=progress)
        for indices in bar:
            for i in indices:
                row, tokens = prepared.rows[i], prepared.prompts[i]
                if row["id"] in done:
                    continue
                if tokens.truncated:
                    raise ValueError(
                        f"{prepared.name}: row {row['id']} is longer than the length budget, and log-likelihood "
                        "scoring does not truncate; raise --max_length or drop --truncate for this task"
                    )
                scores = continuation_scores(model, tokenizer, row["prompt"], row["choices"], use_cache)
                choice = row["choices"][task.choose(scores, row["choices"])]
                score = task.score(choice, row["answers"])
                record = _record(prepared, label, row, choice, score, len(tokens.input_ids), False, "loglikelihood")
                yield {**record, "loglikelihoods": [total for total, _ in scores]}


def gold_token_ids(tokenizer, prepared: PreparedTask, row: Mapping[str, Any]) -> list[int]:
    """The token ids of a row's gold continuation (`Task.gold_continuation`), as the model would write them."""
    text = prepared.task.gold_continuation(row["answers"], prepared.chat_template)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not ids or not text.strip():  # a blank answer's log-probability measures spacing, not the answer
        raise ValueError(
            f"{prepared.name}: row {row['id']}'s gold answer {text!r} is blank; fix the data, or score it by metric"
        )
    return ids


def refuse_unforceable(stack: MethodStack, model) -> None:
    """A one-line refusal when a method of the attached `stack` has no teacher-forced log-likelihood."""
    for index, method in enumerate(stack.methods):
        problem = method.forced_scoring_problem(model)
        if problem:
            raise ValueError(f"--score gold_loglik, method stack {stack.label!r} (method {index + 1}): {problem}")


def _gold_loglik_records(model, tokenizer, prepared: PreparedTask, stack: MethodStack, todo, done, progress):
    """Records of `--score gold_loglik`: each row's gold answer teacher-forced through the method stack
    (`score_continuations`); the score is its mean log-probability per token, no text is generated."""
    label = stack.label
    limit, past_limit = getattr(model.config, "max_position_embeddings", None), 0
    with stack.attached(model, tokenizer):
        refuse_unforceable(stack, model)
        for indices in track(todo, f"{prepared.name} / {label} (gold log-likelihood)", unit="batch", mode=progress):
            rows, batch = _collated(prepared, indices, tokenizer.pad_token_id, model.device)
            gold = [gold_token_ids(tokenizer, prepared, row) for row in rows]
            for row, result in zip(rows, score_continuations(model, tokenizer, batch, gold, stack)):
                if row["id"] in done:
                    continue
                past_limit += limit is not None and result.prompt_tokens + result.tokens > limit
                record = _record(prepared, label, row, "", result.mean_logprob, result.prompt_tokens,
                                 result.truncated, "forced")  # fmt: skip
                yield {**record, "gold_tokens": result.tokens, "greedy_match": result.greedy_match}
    if past_limit and rank_and_world()[0] == 0:
        print(
            f"[evaluation] note: {prepared.name} / {label}: {past_limit} gold answer(s) run past the model's "
            f"max_position_embeddings ({limit}); their scores use positions it was not trained on",
            file=sys.stderr,
        )


def method_pins(stacks: Sequence[MethodStack]) -> dict[str, dict[str, Any]]:
    """Per method stack label, the identity (`file_identity`) of every file its methods read (a scale file):
    the label names the path, and a file replaced at that path must not resume into the same records."""
    pins = {}
    for stack in stacks:
        files = {}
        for method in stack.methods:
            for item in fields(method) if dataclasses.is_dataclass(method) else ():
                value = getattr(method, item.name, None)
                if isinstance(value, str) and value and Path(value).is_file():
                    files[value] = file_identity(value)
        pins[stack.label] = {"files": files}
    return pins


def _manifest(
    config: RunConfig,
    identity: Mapping[str, str],
    tokenizer,
    dtype: str,
    weights: Mapping[str, Any] | None = None,
    methods: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the records depend on; per task its parameters, decoding and metric (a score of another metric
    must not be mixed in: kv's default changed from best_subspan_em to kv_containment); the prompt format
    (chat template, system prompt) with the decoding; the weight files (`weights_identity`, None for a model
    handed to `run` in memory), the tokenizer (`tokenizer_fingerprint`) and the files each method stack reads."""
    tasks = {}
    for task in config.tasks:
        settings = config.settings(task)
        tasks[task.name] = {
            "params": {"example_offset": 0, **task_params(task)},  # which source examples: always stated
            "max_new_tokens": settings.max_new_tokens,
            "stop_strings": list(settings.stop_strings),
            # kv's depends on its parameters (`metric`, default kv_containment); --score gold_loglik replaces it
            "metric": GOLD_LOGLIK if config.score == GOLD_LOGLIK else task.metric_name,
        }
    decode = {
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "truncate": config.truncate,
        "prompt_format": config.prompt_format.describe(tokenizer),
        "dtype": dtype,  # the weights' dtype as run (--dtype auto: bfloat16 on a GPU)
    }
    return {
        "format_version": FORMAT_VERSION,
        "model": dict(identity),
        "weights": None if weights is None else dict(weights),
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "methods": dict(methods or {}),
        "decode": decode,
        "tasks": tasks,
    }


#: Keys of run.json that runs before this version did not write: such a run resumes without those checks.
_PINNED_SINCE_V9 = ("weights", "tokenizer", "methods")


def _merge_manifest(
    out: Path, manifest: dict[str, Any], classes: Mapping[str, type[Task]] | None = None
) -> dict[str, Any]:
    """The settings file to write: refuse a directory holding records made under other settings, else merge tasks.

    `classes` (task name -> its class) completes the parameters of a run.json written by a Python caller before
    run.json pinned every parameter (it pinned those the caller gave): the task they configure, in full."""
    path = out / MANIFEST_FILE
    if not path.is_file():
        return manifest
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        old = err
    if not isinstance(old, dict):  # which settings made the records is unknown: never resume into it
        raise ValueError(  # noqa: TRY004  (a user's file: a user error, exit code 2)
            f"{path} (the settings of the records in {out}) is not a JSON object, truncated or corrupt; "
            "use another --out directory, or delete this one to start over"
        )
    fresh = json.loads(json.dumps(manifest, default=str))
    if isinstance(old.get("decode"), dict) and "prompt_format" not in old["decode"]:  # a run from before the option
        old["decode"]["prompt_format"] = PromptFormat().describe(None)
    if isinstance(old.get("decode"), dict):  # a run from before dtype was recorded: unknown, taken as this one
        old["decode"].setdefault("dtype", fresh["decode"]["dtype"])
    for name, spec in (old.get("tasks") or {}).items():
        if isinstance(spec, dict) and isinstance(spec.get("params"), dict):  # before example_offset: from 0
            spec["params"].setdefault("example_offset", 0)
            grid = spec["params"].get("gold_positions")
            if isinstance(grid, str) and grid.lower() in RENAMED_GRIDS:  # before the rename: the same positions
                spec["params"]["gold_positions"] = RENAMED_GRIDS[grid.lower()]
            spec["params"] = _in_full(spec["params"], (classes or {}).get(name))
    unpinned = [key for key in _PINNED_SINCE_V9 if key not in old]
    old.update({key: fresh[key] for key in unpinned})  # unknown for an older run: taken as this run's
    differs = [key for key in ("format_version", "decode") if old.get(key) != fresh[key]]
    differs += _differing("model", old.get("model"), fresh["model"])
    differs += _differing("weights", old.get("weights"), fresh["weights"])
    if old.get("tokenizer") != fresh["tokenizer"]:
        differs.append("tokenizer")
    for label, pins in fresh["methods"].items():
        before = (old.get("methods") or {}).get(label)
        if before is not None and before != pins:  # the file a method reads was replaced at the same path
            differs += [f"methods.{label}.{item}" for item in _differing("files", before.get("files"), pins["files"])]
    for name, spec in fresh["tasks"].items():
        before = old.get("tasks", {}).get(name)
        if isinstance(before, dict):  # checked once the prompts are built (`check_prompts`)
            before = {key: value for key, value in before.items() if key != "prompts_sha256"}
        if before is not None and before != spec:  # e.g. tasks.kv.metric: absent (an older run) or another one
            differs += [f"tasks.{name}.{key}" for key in sorted({*spec, *before}) if before.get(key) != spec.get(key)]
    if differs:
        raise ValueError(
            f"{out} holds results of a run with other settings (differs in {', '.join(differs)}); "
            "use another --out directory, or delete this one to start over"
        )
    if unpinned and rank_and_world()[0] == 0:  # said once: the merged run.json written by the run pins them
        print(
            f"[evaluation] note: {path} was written by an older version that did not pin {', '.join(unpinned)}"
            f"{' (the weights were not pinned)' if 'weights' in unpinned else ''}; resuming without checking them, "
            "and recording them now",
            file=sys.stderr,
        )
    methods = {**(old.get("methods") or {}), **fresh["methods"]}
    return {**fresh, "methods": methods, "tasks": {**old.get("tasks", {}), **fresh["tasks"]}}


def _in_full(params: dict[str, Any], cls: type[Task] | None) -> dict[str, Any]:
    """Pinned task parameters as `task_params` of the task they configure (as given if they configure none)."""
    if cls is None:
        return params
    try:
        task = cls(**params)
    except (TypeError, ValueError, OSError):  # a parameter this version no longer has: compared as pinned
        return params
    return json.loads(json.dumps(task_params(task), default=str))


def prompts_digest(prepared: PreparedTask) -> str:
    """A hash of what a task's records answer: every row's id, gold position and answers, and its prompt's token
    ids (so a data file replaced at the same path, or prompts tokenised otherwise, is told apart)."""
    digest = hashlib.sha256()
    for row, prompt in zip(prepared.rows, prepared.prompts, strict=True):
        head = [row["id"], row["example_id"], row["gold_position"], row["answers"], prompt.truncated]
        digest.update(json.dumps(head, default=str).encode())
        digest.update(prompt.input_ids.as_tensor().numpy().tobytes())  # int64, as array("q") gave: same digest
    return digest.hexdigest()[:32]


def check_prompts(out: Path, manifest: dict[str, Any], prepared: Sequence[PreparedTask]) -> None:
    """Set `tasks.NAME.prompts_sha256` in the manifest to write; refuse a task whose earlier run.json names other
    prompts (the data file or the tokenisation changed under the same settings). An older run.json without it
    resumes (its value is recorded now)."""
    path = out / MANIFEST_FILE
    old = json.loads(path.read_text(encoding="utf-8")).get("tasks", {}) if path.is_file() else {}
    changed = []
    for task in prepared:
        digest = prompts_digest(task)
        before = (old.get(task.name) or {}).get("prompts_sha256")
        if before is not None and before != digest:
            changed.append(task.name)
        manifest["tasks"][task.name]["prompts_sha256"] = digest
    if changed:
        raise ValueError(
            f"{out} holds results of a run with other settings (differs in "
            f"{', '.join(f'tasks.{name}.prompts_sha256' for name in changed)}: the same task settings give other "
            "prompts or answers, e.g. a data file replaced at the same path); use another --out directory, or delete "
            "this one to start over"
        )


def _differing(prefix: str, before: Any, now: Any) -> list[str]:
    """`prefix.key` for every key whose value differs between two mappings (`prefix` alone if either is not one)."""
    if before == now:
        return []
    if not isinstance(before, Mapping) or not isinstance(now, Mapping):
        return [prefix]
    return [f"{prefix}.{key}" for key in sorted({*before, *now}, key=str) if before.get(key) != now.get(key)]


def run(
    config: RunConfig,
    model=None,
    tokenizer=None,
    max_records: int | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    progress: bool | str | None = None,
    config_text: str | None = None,
) -> dict[str, Any] | None:
    """Evaluate every (task, method stack), append records, write summary.json and return the summary.

    `max_records` stops (raising `RunInterrupted`) after that many new records
    (of this rank; None: `config.max_records`); `on_record` sees each record
    once it is on disk; `progress` None: bars unless `config.no_progress`. A given
    model/tokenizer is used as is (`config.model` is then only a label). The
    run owns `config.out` for its whole length (`OUT/run.lock`,
    `repo_common.run_lock`): a second run into the same directory is refused
    before loading anything. `config_text`, the command's resolved
    configuration, is stored as `OUT/config.yaml` (the latest command's:
    rerunning it with `--config` replays the run).

    Under torchrun (`repo_common.distributed` initialised) every rank calls
    `run` with the same config: the pending batches of every (task, method)
    are shared out by token cost (`balanced_shares`), each rank appends its
    records to `OUT/records.rank{r}.jsonl`, and rank 0 merges them into
    records.jsonl in the one-process order and writes the summary, which it
    returns; the other ranks return None. Leftover rank files of a killed run
    count as done on the next run, at any number of ranks.
    """
    check_run_directory(config.out)
    max_records = config.max_records if max_records is None else max_records
    progress = not config.no_progress if progress is None else progress
    rank, world = rank_and_world()
    owner = locked_directory(config.out, f"evaluation run directory {config.out}") if rank == 0 else nullcontext()
    with owner:  # rank 0 owns the directory; if it is refused, it exits and torchrun stops the other ranks
        return _run_locked(config, model, tokenizer, max_records, on_record, progress, config_text, rank, world)


def _run_locked(config: RunConfig, model, tokenizer, max_records, on_record, progress, config_text, rank, world):
    """`run` while rank 0 holds the directory's lock."""
    stacks, labels = config.methods, config.labels  # objects, configured and checked when `config` was made
    weights = None  # a model handed over in memory: its files (if any) are the caller's business
    if model is None and config.model:
        dtype = resolve_dtype(config.dtype, config.device)
        model, tokenizer = load_model(Path(config.model).resolve(), dtype, config.attn_implementation)
        model = place_model(model, config.device)
        weights = weights_identity(Path(config.model).resolve())
    elif model is None:
        check_tiny_default_options(config.dtype, config.attn_implementation)
        model, tokenizer = tiny_default(config.seed)
        model = place_model(model, config.device)
        weights = {"tiny_default_seed": config.seed}
    for stack in stacks:  # a method that cannot apply to this model fails before anything is written
        with stack.attached(model, tokenizer):
            if config.score == GOLD_LOGLIK:
                refuse_unforceable(stack, model)
    notice = chat_template_notice(tokenizer, config.prompt_format)
    if notice and rank == 0:
        print(f"[evaluation] {notice}", file=sys.stderr)
    identity = model_identity(model)
    # Another model's scale file is refused here unless asked for; the notes (applied anyway, or a file that
    # records no model) are printed once the run is known not to be refused, so a refusal stays one line.
    scale_notes = check_scale_file_models(stacks, identity, weights, config.allow_other_model_scales)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    fresh = _manifest(config, identity, tokenizer, dtype, weights, method_pins(stacks))
    manifest = _merge_manifest(out, fresh, {task.name: type(task) for task in config.tasks})
    for note in scale_notes if rank == 0 else ():
        print(f"[evaluation] {note}", file=sys.stderr)
    prepared = [
        dataclasses.replace(
            prepare(task, model, tokenizer, config.settings(task), config.prompt_format), score=config.score
        )
        for task in config.tasks
    ]
    check_prompts(out, manifest, prepared)  # the same settings over replaced data: refused before any write
    overlap = check_disjoint(  # a searched method scored on its own search's examples is refused here
        [(task.name, task.source_fingerprints) for task in prepared],
        [(stack.label, stack.methods) for stack in stacks],
        allow=config.allow_search_overlap,
    )
    if rank == 0:
        write_json_atomic(out / MANIFEST_FILE, manifest)  # only once the tasks are valid (e.g. prompts fit)
        done = _done_ids(out, repair=True)  # a killed writer's torn last line goes before anyone appends
        if config_text is not None:  # once the earlier records are known to be readable
            write_text_atomic(out / CONFIG_FILE, config_text)
    barrier()
    if rank != 0:
        done = _done_ids(out)
    barrier()  # every rank has read what is done before any rank appends
    units = _pending_units(prepared, stacks, done)
    mine = balanced_shares([cost for *_, cost in units], world)[rank]
    target = out / RECORDS_FILE if world == 1 else rank_records_file(out, rank)
    written = 0
    with closing(RecordWriter(target)) as writer:
        for (t, s), batches in _by_task_and_stack([units[i] for i in mine]).items():
            task, stack = dataclasses.replace(prepared[t], plan=batches), stacks[s]
            already = done.setdefault((task.name, stack.label), set())
            mode = progress if rank == 0 else "off"
            # closing(): an exception here must detach the methods now, not when the generator is collected
            with closing(run_stack(model, tokenizer, task, stack, already, mode)) as records:
                for record in records:
                    writer.write(record)
                    already.add(record["id"])
                    written += 1
                    if on_record is not None:
                        on_record(record)
                    if max_records is not None and written >= max_records:
                        raise RunInterrupted(
                            f"stopped after {written} new records (max_records); rerun the same command to resume"
                        )
    barrier()
    if rank != 0:
        barrier()  # rank 0 merges and summarises
        return None
    merge_rank_records(out, _plan_order(prepared, labels))
    summary = _summarize(config, identity, labels, prepared, tokenizer, overlap, dtype)
    write_json_atomic(out / SUMMARY_FILE, summary)
    barrier()
    return summary


def _done_ids(out: Path, repair: bool = False) -> dict[tuple[str, str], set[str]]:
    """(task, method) -> ids with a record, in records.jsonl or in a rank file not merged yet (`read_records`)."""
    done: dict[tuple[str, str], set[str]] = {}
    for path in [out / RECORDS_FILE, *rank_records_files(out)]:
        for record in read_records(path, repair=repair):
            done.setdefault((record["task"], record["method"]), set()).add(record["id"])
    return done


def _pending_units(prepared: Sequence[PreparedTask], stacks: Sequence[MethodStack], done) -> list[tuple]:
    """(task index, stack index, batch, cost) of every batch with a missing record, in the one-process order."""
    units = []
    for t, task in enumerate(prepared):
        lengths = [len(p.input_ids) for p in task.prompts]
        for s, stack in enumerate(stacks):
            finished = done.get((task.name, stack.label), set())
            for batch in task.plan:
                if any(task.rows[i]["id"] not in finished for i in batch):
                    units.append((t, s, batch, batch_cost(lengths, batch, task.settings.max_new_tokens)))
    return units


def _by_task_and_stack(units: Sequence[tuple]) -> dict[tuple[int, int], list[list[int]]]:
    """A rank's units grouped per (task, stack), each group's batches in plan order."""
    grouped: dict[tuple[int, int], list[list[int]]] = {}
    for t, s, batch, _ in units:
        grouped.setdefault((t, s), []).append(batch)
    return grouped


def _plan_order(prepared: Sequence[PreparedTask], labels: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple]:
    """Sort key putting records in the order a one-process run writes them: task, method stack, plan position."""
    position = {}
    for t, task in enumerate(prepared):
        flat = [task.rows[i]["id"] for batch in task.plan for i in batch]
        for s, label in enumerate(labels):
            position.update({(task.name, label, row_id): (t, s, p) for p, row_id in enumerate(flat)})
    last = (len(prepared), 0, 0)  # records of tasks or methods this run does not list: after its own

    def key(record: Mapping[str, Any]) -> tuple:
        return position.get((record["task"], record["method"], record["id"]), last)

    return key


def _summarize(
    config: RunConfig, identity, labels, prepared: Sequence[PreparedTask], tokenizer, overlap, dtype
) -> dict:
    manifest = _manifest(config, identity, tokenizer, dtype)
    ids = {task.name: {row["id"] for row in task.rows} for task in prepared}
    written = [
        r for r in read_records(Path(config.out) / RECORDS_FILE) if r["task"] in ids and r["id"] in ids[r["task"]]
    ]
    records = [r for r in written if r["method"] in labels]
    left_out = sorted({r["method"] for r in written} - set(labels))
    if left_out:  # an earlier run of this directory evaluated more methods: say so, never drop them unmentioned
        print(
            f"note: {RECORDS_FILE} also holds records of {', '.join(left_out)} (an earlier run here), left out of "
            "this summary and report; pass those --methods too to include them",
            file=sys.stderr,
        )
    tasks = {
        task.name: {**manifest["tasks"][task.name], "rows": len(task.rows)}  # the manifest names the metric
        for task in prepared
    }
    return build_summary(
        records,
        model={**identity, "path": config.model},
        tasks=tasks,
        methods=labels,
        extra={
            "decode": manifest["decode"],
            **({"search_overlap": overlap} if overlap else {}),
            **({"methods_left_out": left_out} if left_out else {}),
        },
        n_resamples=config.bootstrap_resamples,
    )
