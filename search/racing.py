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

With `exact_bound` (a deterministic rule, no statistics) a running candidate
is also dropped after any stage once it cannot beat the incumbent even if
every remaining question goes its way: its prefix sum plus the fitness's
`question_score_max` for each of the N − n questions left, over N, is below
the incumbent's fitness. It never drops a candidate that could become the
best (the best only changes on a strictly higher fitness), and it needs no
`min_questions`. The fitness declares the bound (`HarnessFitness`: 1, the
Eq. 7 weights sum to 1 and the metrics score in [0, 1]; 0 with
`score="gold_loglik"`, a log-probability); a question scored above it stops
the search with a one-line error rather than drop on a false bound.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from evaluation.statistics import bootstrap_ci, check_bootstrap_args
from search.fitness import FitnessResult

if TYPE_CHECKING:
    from search.fitness_cache import FitnessCache
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
    exact_bound: bool = False
    """Also drop a candidate that cannot beat the incumbent even at the top score on every question left."""

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
        check_bootstrap_args(self.resamples, 1 - self.confidence, "ga.racing.resamples")
        if self.min_questions < 1:
            raise ValueError(f"ga.racing.min_questions must be >= 1, got {self.min_questions}; 8 is the default")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"ga.racing.seed must be an integer seed in [0, 2**32), got {self.seed}")

    def stages(self, num_questions: int) -> list[int]:
        """Question counts of the stages: ⌈fraction · N⌉, repeats merged, ending with N."""
        return sorted({max(1, math.ceil(f * num_questions - 1e-9)) for f in self.fractions})

    def describe(self, num_questions: int) -> str:
        """The stages in questions, as a log's first line names them: 'stages of 4, 8, 16 questions, ...'."""
        stages = ", ".join(str(n) for n in self.stages(num_questions))
        return f"racing in stages of {stages} questions, none dropped before {self.min_questions}"

    def first_stage_notice(self, num_questions: int) -> str | None:
        """A notice when the first stage is far above `min_questions`: every candidate pays for the whole first
        stage before any can be dropped, so in generation 0 racing costs at least (n_1 (P - 1) + N) / (P N) of the
        plain GA's prompts, and a first stage near `min_questions` lowers that floor. None when it is near."""
        first = self.stages(num_questions)[0]
        if first <= 2 * self.min_questions or first == num_questions:
            return None
        share = self.min_questions / num_questions
        return (
            f"racing's first stage scores {first} of the {num_questions} questions before any candidate can be "
            f"dropped (min_questions {self.min_questions}); a first fraction near {share:.3g} (e.g. fractions "
            f"{_doubling(share)}) drops hopeless candidates sooner (docs/search.md, racing)"
        )

    @classmethod
    def from_json(cls, data: dict | RacingConfig | None) -> RacingConfig | None:
        if data is None or isinstance(data, RacingConfig):
            return data
        return cls(**data)


def _doubling(first: float) -> list[float]:
    """Fractions that start at `first` and double up to 1.0: [first, 2 first, 4 first, ..., 1.0]."""
    fractions = []
    while first < 0.75:
        fractions.append(float(f"{first:.3g}"))
        first *= 2
    return [*fractions, 1.0]


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
    dropped_exact: int = 0
    """Of `dropped`, those the exact bound dropped (before the bootstrap was asked)."""
    stage_questions: list[int] = field(default_factory=list)
    """(candidate, question) pairs scored at each stage, in stage order (cached ones excluded)."""


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
    ceiling = question_score_max(fitness) if config.exact_bound else None
    incumbent_sum = None
    if ceiling is not None and incumbent is not None:
        incumbent_sum = math.fsum(r.overall for r in cache.questions(context, incumbent))
    for stop in config.stages(total):
        if not running:
            break
        before = counts.questions
        _score_up_to(cache, context, space, fitness, running, stop, counts, clock, ceiling)
        counts.stage_questions.append(counts.questions - before)
        if stop == total:
            break
        if incumbent_sum is not None:
            hopeless = [
                g for g in running if cannot_beat(cache.questions(context, g)[:stop], total, ceiling, incumbent_sum)
            ]
            counts.dropped += len(hopeless)
            counts.dropped_exact += len(hopeless)
            running = [g for g in running if g not in hopeless]
        if stop < config.min_questions or not running:
            continue
        field_ = ([incumbent] if incumbent is not None else []) + running
        means = {g: prefix_mean(cache.questions(context, g)[:stop]) for g in field_}
        leader = max(field_, key=lambda g: means[g])  # the first of equals: the incumbent, then population order
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


def question_score_max(fitness: object) -> float:
    """The top score one question can get, as the fitness declares it (`exact_bound` needs it)."""
    ceiling = getattr(fitness, "question_score_max", None)
    if not isinstance(ceiling, int | float) or not math.isfinite(ceiling):
        raise TypeError(
            f"ga.racing.exact_bound needs the fitness's question_score_max (the top score of one question); "
            f"{type(fitness).__name__} has {ceiling!r}: set it on the fitness or drop exact_bound"
        )
    return float(ceiling)


def cannot_beat(scores: Sequence[FitnessResult], total: int, ceiling: float, incumbent_sum: float) -> bool:
    """True when `scores` (questions 0 … n − 1) plus `ceiling` on each of the other total − n questions stay below
    the incumbent's sum over all `total`: the candidate's fitness could at best fall short of the incumbent's.
    A margin of 1e-9 of the scale keeps float rounding from dropping a candidate that could tie."""
    best_case = math.fsum(r.overall for r in scores) + (total - len(scores)) * ceiling
    margin = 1e-9 * max(1.0, abs(incumbent_sum), abs(best_case))
    return best_case < incumbent_sum - margin


def _score_up_to(cache, context, space, fitness, genomes, stop, counts: RaceCounts, clock, ceiling=None) -> None:
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
            if ceiling is not None and any(r.overall > ceiling for r in scores):
                top = max(r.overall for r in scores)
                raise ValueError(
                    f"a question scored {top} > the fitness's question_score_max {ceiling}: ga.racing.exact_bound "
                    "would drop on a false bound; fix question_score_max or drop exact_bound"
                )
            cache.extend_questions(context, genome, start, scores)
        counts.questions += len(group) * (stop - start)
