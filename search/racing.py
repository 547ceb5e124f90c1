"""Racing: score a generation's candidates on growing prefixes of the fitness set and drop the hopeless ones early.

The plain GA scores every new candidate on every question of the search set.
Most children of a good population are clearly worse than its best, and a
few questions already show it. With `ga.racing` set, a generation's new
candidates are scored in stages on the first n_1 < n_2 < … < N questions
(`fractions` of the N questions, rounded up; the same questions for every
candidate, in the search set's order). After each stage but the last:

- the reference is the leader on the questions scored so far: the highest
  prefix mean among the incumbent (the search's best so far, fully scored)
  and the candidates still running (ties: the incumbent, then population order);
- for every other running candidate c the per-question differences
  d_q = f_q(c) − f_q(reference), q < n_i, get a percentile-bootstrap interval
  of their mean (`evaluation.statistics.bootstrap_ci`, questions resampled:
  the pairing by question the harness's statistics use);
- c is dropped when the whole interval lies below 0 (its upper bound under the
  reference's, paired), once at least `min_questions` questions are scored.

Survivors are scored on all N questions and get the same `FitnessResult` as the
plain GA's (the fitness's `combine_questions`). A dropped candidate never
becomes the best and is ranked for selection below every fully scored one:
first by how many questions it reached, then by its prefix mean. Per-question
scores are cached by (context, genome) in the search state, so a genome met
again only pays for questions it has not seen, and the reference's scores are
free.

A fitness that races implements `QuestionFitness`: `num_questions`,
`evaluate_questions(scales, start, stop)` (one `FitnessResult` per candidate
and question: `overall` is that question's Eq. 7 score) and
`combine_questions(results)` (the full-set result from the per-question ones,
as `evaluate` computes it). `search.harness_fitness.HarnessFitness` and
`search.fitness.SyntheticQuestionFitness` do.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from evaluation.statistics import bootstrap_ci
from search.fitness import FitnessResult

if TYPE_CHECKING:
    from search.ga import FitnessCache
    from search.genome import Genome, SearchSpace


@dataclass(frozen=True)
class RacingConfig:
    """How candidates race (`ga.racing`; None there = the plain GA, every candidate on every question)."""

    fractions: tuple[float, ...] = (0.25, 0.5, 1.0)
    """Growing shares of the search set's questions, the last 1.0: the stages of the race."""
    confidence: float = 0.95
    """Level of the paired bootstrap interval; a candidate is dropped when its interval lies below the leader."""
    resamples: int = 1000
    """Bootstrap resamples per decision."""
    min_questions: int = 8
    """No candidate is dropped on fewer questions (a percentile bootstrap of a handful is too confident)."""
    seed: int = 0
    """Seed of the bootstrap (the same for every decision, so a resumed search decides alike)."""

    def __post_init__(self) -> None:
        fractions = tuple(float(f) for f in self.fractions)
        object.__setattr__(self, "fractions", fractions)
        if not fractions or fractions[-1] != 1.0 or any(not 0 < f <= 1 for f in fractions):
            raise ValueError(
                f"ga.racing.fractions must lie in (0, 1] and end with 1.0 (the whole set), got {list(fractions)}"
            )
        if any(b <= a for a, b in itertools.pairwise(fractions)):
            raise ValueError(f"ga.racing.fractions must increase, got {list(fractions)}: e.g. [0.25, 0.5, 1.0]")
        if not 0 < self.confidence < 1:
            raise ValueError(f"ga.racing.confidence must lie in (0, 1), got {self.confidence}; 0.95 is usual")
        if self.resamples < 1 or self.min_questions < 1:
            raise ValueError(
                f"ga.racing.resamples and min_questions must be >= 1, got {self.resamples}, {self.min_questions}"
            )

    def stages(self, num_questions: int) -> list[int]:
        """Question counts of the stages: ⌈fraction · N⌉, repeats merged, ending with N."""
        return sorted({max(1, math.ceil(f * num_questions - 1e-9)) for f in self.fractions})

    @classmethod
    def from_json(cls, data: dict | RacingConfig | None) -> RacingConfig | None:
        if data is None or isinstance(data, RacingConfig):
            return data
        return cls(**data)


@runtime_checkable
class QuestionFitness(Protocol):
    """A fitness that also scores single questions (for racing); see the module docstring."""

    num_questions: int

    def evaluate(self, scales: list[list[float]]) -> list[FitnessResult]: ...

    def evaluate_questions(self, scales: list[list[float]], start: int, stop: int) -> list[list[FitnessResult]]: ...

    def combine_questions(self, results: Sequence[FitnessResult]) -> FitnessResult: ...


def check_racing_fitness(fitness: object) -> None:
    """A one-line refusal when `ga.racing` is set but the fitness cannot score single questions."""
    if not isinstance(fitness, QuestionFitness):
        raise TypeError(
            f"ga.racing needs a fitness that scores single questions ({type(fitness).__name__} has no "
            "num_questions / evaluate_questions / combine_questions): drop ga.racing for the plain GA"
        )


def prefix_mean(scores: Sequence[FitnessResult]) -> float:
    """Mean Eq. 7 score of the questions scored so far (exactly rounded, so it does not depend on order)."""
    return math.fsum(r.overall for r in scores) / len(scores)


@dataclass
class RaceCounts:
    """What one generation's race cost and decided."""

    candidates: int = 0
    """New candidates (not fully scored before): the plain GA's `evaluated`."""
    hits: int = 0
    """Candidates already fully scored, or repeated in the batch."""
    questions: int = 0
    """(candidate, question) pairs scored now (cached ones excluded)."""
    dropped: int = 0
    """Candidates dropped before the last stage."""


def race(
    cache: FitnessCache,
    context: str,
    space: SearchSpace,
    fitness: QuestionFitness,
    genomes: list[Genome],
    incumbent: Genome | None,
    config: RacingConfig,
    clock: dict[str, float],
) -> RaceCounts:
    """Race the not fully scored `genomes`; survivors get a full result in `cache`, all their question scores."""
    counts = RaceCounts()
    running: list[Genome] = []
    for genome in genomes:
        if cache.get(context, genome) is not None or genome in running:
            counts.hits += 1
        else:
            running.append(genome)
    counts.candidates = len(running)
    total = fitness.num_questions
    for stop in config.stages(total):
        if not running:
            break
        _score_up_to(cache, context, space, fitness, running, stop, counts, clock)
        if stop == total:
            break
        if stop < config.min_questions:
            continue
        field = ([incumbent] if incumbent is not None else []) + running
        means = {g: prefix_mean(cache.questions(context, g)[:stop]) for g in field}
        leader = max(field, key=lambda g: means[g])  # the first of equals: the incumbent, then population order
        reference = [r.overall for r in cache.questions(context, leader)[:stop]]
        kept = []
        for genome in running:
            if genome != leader:
                mine = cache.questions(context, genome)[:stop]
                differences = [r.overall - ref for r, ref in zip(mine, reference)]
                interval = bootstrap_ci(differences, config.resamples, 1 - config.confidence, config.seed)
                if interval.high < 0:
                    counts.dropped += 1
                    continue
            kept.append(genome)
        running = kept
    for genome in running:
        cache.put(context, genome, fitness.combine_questions(cache.questions(context, genome)))
    return counts


def _score_up_to(cache, context, space, fitness, genomes, stop, counts: RaceCounts, clock) -> None:
    """Score each genome's questions [cached, stop), one `evaluate_questions` batch per start (usually one)."""
    by_start: dict[int, list] = {}
    for genome in genomes:
        start = len(cache.questions(context, genome))
        if start < stop:
            by_start.setdefault(start, []).append(genome)
    for start, group in sorted(by_start.items()):
        began = time.perf_counter()
        results = fitness.evaluate_questions([space.scales(g) for g in group], start, stop)
        clock["fitness_s"] += time.perf_counter() - began
        if len(results) != len(group) or any(len(r) != stop - start for r in results):
            raise TypeError(
                f"fitness.evaluate_questions returned {[len(r) for r in results]} for {len(group)} candidates × "
                f"{stop - start} questions: it must return one list of per-question FitnessResults per candidate"
            )
        for genome, scores in zip(group, results):
            cache.extend_questions(context, genome, start, scores)
        counts.questions += len(group) * (stop - start)
