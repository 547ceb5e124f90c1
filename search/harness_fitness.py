"""The model-scored LPES fitness: the evaluation harness generates, the task's metric scores, Eq. 7 combines.

Search sets. The search set is built ONCE from one harness task (MDQA or KV
retrieval) with the relevant item at three indices of k:

    begin = 0,   middle = ⌊(k − 1) / 2⌋,   end = k − 1,

so every source example appears in all three subsets on an otherwise identical
context (a paired design; the task grids such as 'quartiles' have five positions,
the fitness needs exactly three). `num_examples` source examples give
3 · num_examples prompts. They are built, tokenised and length-checked once
by `evaluation.runner.prepare_task` (which also caches the tokens in memory)
and split into batches by its plan.

Scoring. For each candidate scale vector the model gets the scales
(`search.policy.scaled_model`: layer h sees positions / s_h), the harness
generates greedily over the prepared batches (`evaluation.runner.run_stack`),
each answer is scored with the task's metric, and

    Acc_s = mean score over subset s,   F = λ_B Acc_B + λ_M Acc_M + λ_E Acc_E   (Eq. 7).

With `score="gold_loglik"` (`task.score`; this project's extension, not the
paper's) a prompt is scored without generating: its gold continuation
(`Task.gold_continuation`: the first gold answer after the task's delimiter)
is appended and the model's mean log-probability per token of it is the score,
one teacher-forced forward per batch (`evaluation.loglik.token_continuation_scores`).
A right/wrong metric on a few dozen questions ties most candidates; a
log-probability is continuous, so paired differences between candidates show
on far fewer questions (what racing needs), and a step costs one prefill.
Unlike a greedy answer, a log-probability changes in its last bits with the
batch's padding, so the whole-set batches of `evaluate` and racing's
per-stage batches agree to float rounding (about 1e-6 of the value), not bit
for bit: two candidates that tie to that precision may be ordered
differently by the plain GA and by a race that drops nothing.

Distributed. Under torchrun (torch.distributed initialised; gloo on CPU, nccl
on GPU) the batches of the plan are shared out by their token cost
(`repo_common.distributed.balanced_shares`, the helper the evaluation runner
uses too), so every prompt is generated in exactly the batch (same padding
companions) it has in a one-process run. Each rank writes its rows' scores into a
[candidates × rows] matrix of zeros and the matrix is all-reduced (sum): every
entry has one non-zero contributor, so the sum is exact, every rank holds
the same matrix, and the per-subset means are computed from it in one fixed
order. Hence the fitness is bit-identical on every rank and equal to a
one-process run, for any world size.

Questions (racing, search/racing.py). A question is one source example: its
three prompts (begin, middle, end) in the search set's order. Its Eq. 7 score
is λ_B s_B + λ_M s_M + λ_E s_E, and the search-set fitness is their mean.
`evaluate_questions(scales, start, stop)` generates the prompts of questions
[start, stop) only, in a batch plan of those prompts (made once per range,
shared out across ranks as above), so a question's score does not depend on
which candidates or stages it was scored with.

Held-out evaluation (`evaluate_held_out`) builds a second set from other
source examples (skipping the search's, and/or another seed) and scores the
baseline (all scales 1), PI at the mean scale, and the found scales.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from evaluation.generation import batch_cost, plan_batches
from evaluation.loglik import pad_token_id, token_continuation_scores
from evaluation.methods import MethodStack
from evaluation.methods.decoding import DecodeSettings
from evaluation.model_identity import weights_fingerprint
from evaluation.prompt_format import PromptFormat
from evaluation.runner import PreparedTask, gold_token_ids, prepare_task, run_stack, task_generation
from evaluation.tasks import build_task
from repo_common import user_code
from repo_common.distributed import all_reduce_sum, balanced_shares, rank_and_world
from repo_common.progress import track
from repo_train.modeling.scaling import scaled_policies
from repo_train.modeling.swapping import current_policies
from search.fitness import SCORES, SUBSETS, FitnessResult, Score, SubsetWeights, context_key
from search.policy import scaled_model
from search.scale_file_writer import config_sha256
from search.search_task import item_parameter, task_name

_SET_HERE = ("gold_positions", "num_examples", "seed")


def subset_positions(num_items: int) -> dict[str, int]:
    """Gold index of each subset: begin 0, middle ⌊(k − 1)/2⌋, end k − 1 (k >= 3, so all distinct)."""
    if num_items < 3:
        raise ValueError(f"the begin/middle/end subsets need k >= 3 items, got k = {num_items}")
    return {"begin": 0, "middle": (num_items - 1) // 2, "end": num_items - 1}


def model_fingerprint(model: torch.nn.Module) -> dict[str, str]:
    """What a fitness value depends on in the model: its config and its weights."""
    return {"config_sha256": config_sha256(model.config), "weights": weights_fingerprint(model)}


# ---------------------------------------------------------------- the fitness


class HarnessFitness:
    """`Fitness` scored by the evaluation harness on a begin/middle/end search set (see the module docstring).

    `task` is "mdqa", "kv" or another task's name or class_path (`search.search_task`); `task_params` are
    the task's `build_task` parameters except gold_positions / num_examples / seed, which this class
    sets (k = `num_documents` for MDQA, `num_keys` for KV, `num_items` for any other task, required).
    `example_offset` skips that many source examples first (held-out sets).
    """

    def __init__(
        self,
        model,
        tokenizer,
        task: str,
        task_params: Mapping[str, Any] | None = None,
        *,
        num_examples: int = 200,
        example_offset: int = 0,
        seed: int = 0,
        weights: SubsetWeights | None = None,
        settings: DecodeSettings | None = None,
        progress: bool | str = False,
        prompt_format: PromptFormat | None = None,
        score: Score = "metric",
    ):
        if score not in SCORES:
            raise ValueError(f"task.score must be one of {list(SCORES)}, got {score!r}")
        key = item_parameter(task)  # mdqa, kv or any task with num_items and gold_positions (a user's too)
        task = task_name(task)  # a class_path as the registry's name, which the harness builds by
        params = dict(task_params or {})
        clash = [key for key in _SET_HERE if key in params]
        if clash:
            raise ValueError(f"task_params must not set {clash}: pass num_examples= / seed= to HarnessFitness")
        if key not in params:
            raise ValueError(f"task {task!r} needs task_params[{key!r}] = k, the number of items")
        num_items = params[key]
        if isinstance(num_items, bool) or not isinstance(num_items, int):
            raise TypeError(f"task_params[{key!r}] must be an int (k), got {num_items!r}")
        if num_examples < 1 or example_offset < 0:
            raise ValueError(f"need num_examples >= 1 and example_offset >= 0, got {num_examples}, {example_offset}")
        self.model, self.tokenizer, self.task = model, tokenizer, task
        self.weights = weights or SubsetWeights()
        self.settings = settings or DecodeSettings(stop_strings=task_generation(task, {**params, "num_examples": 1})[1])
        self.progress = progress
        self.positions = subset_positions(num_items)
        params.update(
            num_examples=example_offset + num_examples, seed=seed, gold_positions=sorted(self.positions.values())
        )
        self.task_params = params
        self.prompt_format = prompt_format or PromptFormat()
        prepared = prepare_task(task, params, model, tokenizer, self.settings, self.prompt_format)
        self.prepared = _drop_examples(prepared, example_offset)
        self.rank, self.world_size = rank_and_world()
        lengths = [len(p.input_ids) for p in self.prepared.prompts]
        costs = [batch_cost(lengths, batch, self.settings.max_new_tokens) for batch in self.prepared.plan]
        mine = balanced_shares(costs, self.world_size)[self.rank]
        self.local = dataclasses.replace(self.prepared, plan=[self.prepared.plan[i] for i in mine])
        self.row_index = {row["id"]: i for i, row in enumerate(self.prepared.rows)}
        subset_of = {position: name for name, position in self.positions.items()}
        self.subset_rows = {name: [] for name in SUBSETS}
        for i, row in enumerate(self.prepared.rows):
            self.subset_rows[subset_of[row["gold_position"]]].append(i)
        self.example_ids = sorted({row["example_id"] for row in self.prepared.rows})
        self.question_rows = _question_rows(self.prepared.rows, subset_of)
        self.num_questions = len(self.question_rows)
        self.score = score
        # racing's exact bound: a question's Eq. 7 score is at most Σλ times a prompt's top score: the harness's
        # metrics score in [0, 1], a log-probability is at most 0
        self.question_score_max = 1.0 if score == "metric" else 0.0
        self.gold_tokens = self._gold_tokens() if score == "gold_loglik" else {}
        self._chunks: dict[tuple[int, int], tuple[PreparedTask, dict[str, int]]] = {}
        self.num_layers = len(current_policies(model))
        scaled_policies(model, [1.0] * self.num_layers, method="LPES")  # a REPO model fails here, not mid-search
        self.data_sha256 = self._data_hash()
        self.metric = self.prepared.task.metric_name
        # the prompt format and score join the context only when not the default, so earlier states still resume
        formats = {"prompt_format": self.prompt_format.describe(tokenizer)} if self.prompt_format.chat_template else {}
        if score != "metric":
            formats["score"] = score
        self.context = context_key(  # a resumed search reuses cached fitness values only if all of these agree
            **formats,
            model=model_fingerprint(model),
            data=self.data_sha256,
            decode=dataclasses.asdict(self.settings),
            weights=self.weights.as_dict(),
            scorer=type(self).__qualname__,
            metric=self.metric,  # kv's default changed (best_subspan_em -> kv_containment): never mix the two
        )

    def _data_hash(self) -> str:
        """sha256 of the search set as the model sees it: ids, gold positions, answers, prompt token ids."""
        digest = hashlib.sha256()
        for row, prompt in zip(self.prepared.rows, self.prepared.prompts):
            item = [row["id"], row["gold_position"], row["answers"], list(prompt.input_ids)]
            digest.update(json.dumps(item).encode() + b"\n")
        return digest.hexdigest()

    def _gold_tokens(self) -> dict[str, tuple[int, ...]]:
        """Each row's gold continuation (`Task.gold_continuation`) as token ids, by row id: what the harness's
        `--score gold_loglik` scores (`gold_token_ids`)."""
        return {row["id"]: tuple(gold_token_ids(self.tokenizer, self.prepared, row)) for row in self.prepared.rows}

    def score_record(self, record: Mapping[str, Any]) -> float:
        """The score of one generated answer: the task's metric, as the harness computed it."""
        return float(record["score"])

    def _row_scores(self, task: PreparedTask) -> Iterator[tuple[str, float]]:
        """(row id, score) of each of `task`'s rows with the scales installed now: the metric of the greedy
        answer, or the gold answer's mean log-probability per token (one forward per batch, no generation)."""
        if self.score == "metric":
            for record in run_stack(self.model, self.tokenizer, task, MethodStack([]), progress="off"):
                yield record["id"], self.score_record(record)
            return
        pad = pad_token_id(self.model, self.tokenizer)
        for batch in task.plan:
            ids = [task.rows[i]["id"] for i in batch]
            prompts = [task.prompts[i].input_ids for i in batch]
            scores = token_continuation_scores(self.model, prompts, [self.gold_tokens[i] for i in ids], pad)
            for row_id, (total, count) in zip(ids, scores):
                yield row_id, total / count

    def _score_matrix(self, task: PreparedTask, scales: list[list[float]], column: Mapping[str, int]) -> torch.Tensor:
        """[candidates × columns] scores of `task`'s rows, identical on every rank (exact: see the module docstring)."""
        local = torch.zeros(len(scales), len(column), dtype=torch.float64)
        mode = self.progress if self.rank == 0 else "off"  # True: a bar on a terminal, lines in a log file
        for c, candidate in enumerate(track(scales, "candidates", unit="cand", mode=mode)):
            with scaled_model(self.model, candidate):
                for row_id, value in self._row_scores(task):
                    local[c, column[row_id]] = value
        return all_reduce_sum(local)  # one non-zero contributor per entry: exact

    def row_scores(self, scales: list[list[float]]) -> torch.Tensor:
        """[candidates × rows] scores, identical on every rank (rows in `prepared.rows` order)."""
        return self._score_matrix(self.local, scales, self.row_index)

    def evaluate(self, scales: list[list[float]]) -> list[FitnessResult]:
        """Per-subset mean score (accuracy with the metric) and the Eq. 7 overall of each candidate scale vector."""
        scores = self.row_scores(scales)
        results = []
        for row in scores:
            per_subset = {name: float(row[idx].sum()) / len(idx) for name, idx in self.subset_rows.items()}
            results.append(FitnessResult(self.weights.combine(per_subset), per_subset))
        return results

    def evaluate_questions(self, scales: list[list[float]], start: int, stop: int) -> list[list[FitnessResult]]:
        """Per candidate, the results of questions start … stop − 1: each subset's score and their Eq. 7."""
        if not 0 <= start < stop <= self.num_questions:
            raise ValueError(f"questions [{start}, {stop}) are not inside [0, {self.num_questions})")
        local_task, column = self._chunk(start, stop)
        scores = self._score_matrix(local_task, scales, column)
        results = []
        for row in scores:
            per_question = []
            for rows in self.question_rows[start:stop]:
                per_subset = {name: float(row[column[self.prepared.rows[rows[name]]["id"]]]) for name in SUBSETS}
                per_question.append(FitnessResult(self.weights.combine(per_subset), per_subset))
            results.append(per_question)
        return results

    def combine_questions(self, results: Sequence[FitnessResult]) -> FitnessResult:
        """The search-set result from every question's, summed in `evaluate`'s order: the same numbers."""
        per_subset = {
            name: float(torch.tensor([r.per_subset[name] for r in results], dtype=torch.float64).sum()) / len(results)
            for name in SUBSETS
        }
        return FitnessResult(self.weights.combine(per_subset), per_subset)

    def _chunk(self, start: int, stop: int) -> tuple[PreparedTask, dict[str, int]]:
        """This rank's part of the prompts of questions [start, stop), and each row id's column."""
        if (start, stop) not in self._chunks:
            indices = sorted(i for rows in self.question_rows[start:stop] for i in rows.values())
            prompts = [self.prepared.prompts[i] for i in indices]
            lengths = [len(p.input_ids) for p in prompts]
            plan = plan_batches(lengths, self.settings.batch_size)
            costs = [batch_cost(lengths, batch, self.settings.max_new_tokens) for batch in plan]
            mine = balanced_shares(costs, self.world_size)[self.rank]
            texts = [self.prepared.texts[i] for i in indices] if self.prepared.texts else self.prepared.texts
            chunk = dataclasses.replace(
                self.prepared,
                rows=[self.prepared.rows[i] for i in indices],
                prompts=prompts,
                plan=[plan[i] for i in mine],
                texts=texts,
            )
            self._chunks[(start, stop)] = (chunk, {self.prepared.rows[i]["id"]: j for j, i in enumerate(indices)})
        return self._chunks[(start, stop)]

    def source_fingerprints(self) -> list[str]:
        """Its source examples by content (`evaluation.tasks.base.source_fingerprint`), sorted: what an
        evaluation compares with its own to refuse scoring the search's result on the search's examples."""
        return sorted(self.prepared.source_fingerprints())

    def describe(self) -> dict[str, Any]:
        """The search set in a few JSON-able fields (for the scale file and the log); a task from the user's own
        module names it (`import`), so the evaluation command `search show` prints imports it too."""
        cls = type(self.prepared.task)
        class_path = f"{cls.__module__}.{cls.__qualname__}"
        return {
            "task": self.task,
            **({} if user_code.allowed(class_path) else {"import": cls.__module__}),
            "params": {k: v for k, v in self.task_params.items() if k != "num_examples"},
            "num_examples": len(self.example_ids),
            "positions": dict(self.positions),
            "rows": len(self.prepared.rows),
            "metric": self.metric,
            "score": self.score,
            "max_new_tokens": self.settings.max_new_tokens,
            "prompt_format": self.prompt_format.describe(self.tokenizer),
            "data_sha256": self.data_sha256,
        }


def _question_rows(rows: Sequence[Mapping[str, Any]], subset_of: Mapping[int, str]) -> list[dict[str, int]]:
    """Per source example, in order of first appearance: the row index of each subset's prompt."""
    questions: dict[str, dict[str, int]] = {}
    for i, row in enumerate(rows):
        questions.setdefault(row["example_id"], {})[subset_of[row["gold_position"]]] = i
    incomplete = [q for q, found in questions.items() if len(found) != len(SUBSETS)]
    if incomplete:
        raise ValueError(f"example {incomplete[0]} lacks a begin, middle or end prompt: the search set is broken")
    return list(questions.values())


def _drop_examples(prepared: PreparedTask, offset: int) -> PreparedTask:
    """The prepared task without the rows of its first `offset` source examples (same tokens, new plan)."""
    if offset == 0:
        return prepared
    order = list(dict.fromkeys(row["example_id"] for row in prepared.rows))
    skipped = set(order[:offset])
    keep = [i for i, row in enumerate(prepared.rows) if row["example_id"] not in skipped]
    prompts = [prepared.prompts[i] for i in keep]
    plan = plan_batches([len(p.input_ids) for p in prompts], prepared.settings.batch_size)
    return dataclasses.replace(prepared, rows=[prepared.rows[i] for i in keep], prompts=prompts, plan=plan)


def check_held_out_available(
    task: str, task_params: Mapping[str, Any], *, num_examples: int, example_offset: int, seed: int
) -> None:
    """Fail before a search, not hours later: the held-out set (`evaluate_held_out`) can be built from the data.

    The held-out set takes `num_examples` source examples after the first
    `example_offset` (the search's); a data file with fewer is a ValueError
    naming the count, the file and the options. Reads the file only.
    """
    total = example_offset + num_examples
    params = {**task_params, "num_examples": total, "seed": seed, "gold_positions": [0]}
    try:
        next(
            iter(build_task(task_name(task), **params).rows()), None
        )  # the first row needs the whole source (num_examples)
    except ValueError as err:
        reason = str(err).split(";")[0]
        raise ValueError(
            f"the held-out check after the search needs {total} source examples (held_out.num_examples="
            f"{num_examples} after {example_offset} skipped), but {reason}: lower held_out.num_examples (0 skips "
            "the check) or held_out.offset, or use a data file with more examples"
        ) from err


def evaluate_held_out(
    model,
    tokenizer,
    task: str,
    task_params: Mapping[str, Any],
    scales: Sequence[float],
    *,
    num_examples: int = 500,
    example_offset: int = 0,
    seed: int = 0,
    weights: SubsetWeights | None = None,
    settings: DecodeSettings | None = None,
    exclude_example_ids: Sequence[str] = (),
    fitness_cls: type[HarnessFitness] = HarnessFitness,
    prompt_format: PromptFormat | None = None,
    score: Score = "metric",
) -> dict[str, Any]:
    """Score baseline (all 1), PI at the mean scale, and `scales` on examples the search did not use.

    `num_examples` defaults to the paper's held-out size, 500 source examples
    (`search.config.HeldOutConfig`), each at the three positions.

    `exclude_example_ids` are the search set's example ids; an overlap is an
    error (raise `example_offset` or change `seed`).
    """
    fitness = fitness_cls(
        model,
        tokenizer,
        task,
        task_params,
        num_examples=num_examples,
        example_offset=example_offset,
        seed=seed,
        weights=weights,
        settings=settings,
        prompt_format=prompt_format,
        score=score,
    )
    overlap = sorted(set(fitness.example_ids) & set(exclude_example_ids))
    if overlap:
        raise ValueError(
            f"held-out examples overlap the search set ({len(overlap)}, e.g. {overlap[0]}): "
            "raise the held-out offset or use another held-out seed"
        )
    mean = float(np.mean(scales))
    baseline, pi, lpes = fitness.evaluate([[1.0] * len(scales), [mean] * len(scales), [float(s) for s in scales]])
    return {
        "num_examples": num_examples,
        "example_offset": example_offset,
        "seed": seed,
        "data_sha256": fitness.data_sha256,
        "source_fingerprints": fitness.source_fingerprints(),
        "baseline": baseline.to_json(),
        "pi_mean": {"scale": mean, **pi.to_json()},
        "lpes": lpes.to_json(),
    }
