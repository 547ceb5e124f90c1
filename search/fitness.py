"""What the GA maximises: the `Fitness` protocol, the weighted begin/middle/end score (Eq. 7), a synthetic fitness.

LPES scores a candidate scale vector by the model's accuracy on three search
subsets, with the gold information at the beginning, middle or end of the
context, and combines them as (Eq. 7)

    F = λ_B · Acc_B + λ_M · Acc_M + λ_E · Acc_E,   (λ_B, λ_M, λ_E) = (0.2, 0.3, 0.5).

The model-scored fitness comes from the evaluation harness; it only has to
satisfy `Fitness`: take a *batch* of scale vectors (one list of L floats per
candidate) and return one `FitnessResult` each. Batches let a distributed
fitness split examples or candidates across ranks (see `search.ga`).
`SyntheticFitness` has a known optimum and no model, for tests.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import numpy as np

SUBSETS = ("begin", "middle", "end")
#: How a search prompt is scored (`task.score`): "metric", the task's metric of the greedy answer (the paper's
#: accuracy), or "gold_loglik", the gold answer's mean log-probability per token, teacher-forced (this project's
#: extension; search/harness_fitness.py).
Score = Literal["metric", "gold_loglik"]
SCORES: tuple[str, ...] = get_args(Score)
_WEIGHT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SubsetWeights:
    """λ of Eq. 7: how much the begin / middle / end subsets count; non-negative, summing to 1."""

    begin: float = 0.2
    """λ_B, gold information at the start of the context."""
    middle: float = 0.3
    """λ_M, gold information in the middle (the "lost" position)."""
    end: float = 0.5
    """λ_E, gold information at the end."""

    def __post_init__(self) -> None:
        values = self.as_dict()
        negative = {k: v for k, v in values.items() if not v >= 0}
        if negative:
            raise ValueError(f"subset weights must be >= 0, got {negative}")
        total = sum(values.values())
        if abs(total - 1.0) > _WEIGHT_TOLERANCE:
            raise ValueError(
                f"subset weights must sum to 1 (Eq. 7), got {values} summing to {total:.6g}; "
                "rescale them, e.g. divide each by their sum"
            )

    def as_dict(self) -> dict[str, float]:
        return {"begin": self.begin, "middle": self.middle, "end": self.end}

    def combine(self, per_subset: dict[str, float]) -> float:
        """Eq. 7: Σ_s λ_s · score_s over begin, middle, end."""
        missing = [s for s in SUBSETS if s not in per_subset]
        if missing:
            raise ValueError(f"per-subset scores lack {missing}; a fitness must score {list(SUBSETS)}")
        return float(sum(weight * float(per_subset[name]) for name, weight in self.as_dict().items()))


@dataclass(frozen=True)
class FitnessResult:
    """The score of one candidate: `overall` (maximised) and the per-subset scores it combines."""

    overall: float
    per_subset: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.overall):
            raise ValueError(f"fitness must be a finite number, got {self.overall!r}: check the fitness function")

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall, "per_subset": dict(self.per_subset)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FitnessResult:
        return cls(float(data["overall"]), {k: float(v) for k, v in data.get("per_subset", {}).items()})


def describe_result(result: dict[str, Any]) -> str:
    """A `FitnessResult.to_json` in one line, as the search's summary and `search show` print it."""
    parts = ", ".join(f"{k} {v:.3f}" for k, v in result["per_subset"].items())
    return f"{result['overall']:.4f} ({parts})"


@runtime_checkable
class Fitness(Protocol):
    """Scores candidate scale vectors; higher is better.

    `evaluate` gets a batch (each item: one scale per layer) and returns one
    result per item, in order. It must be deterministic for a given batch and
    return the same numbers on every rank when run distributed.
    """

    def evaluate(self, scales: list[list[float]]) -> list[FitnessResult]: ...


def context_key(**parts: Any) -> str:
    """A short hash of what a fitness value depends on (model, search data, weights), for the cache."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SyntheticFitness:
    """A model-free fitness with a known optimum, for tests and benchmarks.

    The layers are split into three contiguous thirds standing in for the
    begin / middle / end subsets; each subset scores `−mean((s_h − target_h)²)`
    over its third, and `overall` combines them by Eq. 7. The maximum, 0, is
    reached exactly when the scales equal `target`. Counts batches (`calls`)
    and candidates (`evaluations`) so tests can check the GA's cache.
    """

    def __init__(self, target: Sequence[float], weights: SubsetWeights | None = None):
        self.target = np.asarray(target, dtype=np.float64)
        if self.target.ndim != 1 or len(self.target) < 3:
            raise ValueError(f"target must list >= 3 per-layer scales, got shape {self.target.shape}")
        self.weights = weights or SubsetWeights()
        self.thirds = dict(zip(SUBSETS, np.array_split(np.arange(len(self.target)), 3)))
        self.calls = 0
        self.evaluations = 0

    def evaluate(self, scales: list[list[float]]) -> list[FitnessResult]:
        self.calls += 1
        results = []
        for candidate in scales:
            values = np.asarray(candidate, dtype=np.float64)
            if values.shape != self.target.shape:
                raise ValueError(f"got {values.size} scales for a {self.target.size}-layer target")
            per_subset = {
                name: -float(np.mean((values[idx] - self.target[idx]) ** 2)) for name, idx in self.thirds.items()
            }
            results.append(FitnessResult(self.weights.combine(per_subset), per_subset))
        self.evaluations += len(scales)
        return results


class SyntheticQuestionFitness(SyntheticFitness):
    """`SyntheticFitness` over `num_questions` questions, for racing (`search.racing.QuestionFitness`).

    Question q has its own target, `target` plus Gaussian offsets of sd `spread`
    (seeded), so candidates differ question by question as a model's answers do;
    a question scores as `SyntheticFitness` does against its target, and the
    fitness of a candidate averages each subset over the questions, then
    combines them by Eq. 7. `evaluate` is `combine_questions` of every
    question, so the plain GA and a race that drops nothing see the same numbers.
    """

    def __init__(
        self,
        target: Sequence[float],
        num_questions: int = 16,
        spread: float = 0.1,
        seed: int = 0,
        weights: SubsetWeights | None = None,
    ):
        super().__init__(target, weights)
        if num_questions < 1:
            raise ValueError(f"num_questions must be >= 1, got {num_questions}")
        self.num_questions = num_questions
        self.question_score_max = 0.0  # −mean squared error: at most 0 (racing's exact bound)
        offsets = np.random.default_rng(seed).normal(0.0, spread, size=(num_questions, self.target.size))
        self.targets = self.target + offsets
        self.question_evaluations = 0

    def evaluate_questions(self, scales: list[list[float]], start: int, stop: int) -> list[list[FitnessResult]]:
        """Per candidate, the results of questions start … stop − 1."""
        if not 0 <= start < stop <= self.num_questions:
            raise ValueError(f"questions [{start}, {stop}) are not inside [0, {self.num_questions})")
        self.calls += 1
        self.question_evaluations += len(scales) * (stop - start)
        return self._score(scales, start, stop)

    def _score(self, scales: list[list[float]], start: int, stop: int) -> list[list[FitnessResult]]:
        results = []
        for candidate in scales:
            values = np.asarray(candidate, dtype=np.float64)
            if values.shape != self.target.shape:
                raise ValueError(f"got {values.size} scales for a {self.target.size}-layer target")
            row = []
            for target in self.targets[start:stop]:
                per_subset = {
                    name: -float(np.mean((values[idx] - target[idx]) ** 2)) for name, idx in self.thirds.items()
                }
                row.append(FitnessResult(self.weights.combine(per_subset), per_subset))
            results.append(row)
        return results

    def combine_questions(self, results: Sequence[FitnessResult]) -> FitnessResult:
        """Each subset's mean over the questions, combined by Eq. 7."""
        per_subset = {name: math.fsum(r.per_subset[name] for r in results) / len(results) for name in SUBSETS}
        return FitnessResult(self.weights.combine(per_subset), per_subset)

    def evaluate(self, scales: list[list[float]]) -> list[FitnessResult]:
        self.calls += 1
        self.evaluations += len(scales)
        return [self.combine_questions(row) for row in self._score(scales, 0, self.num_questions)]
