"""The LPES genetic algorithm (Algorithm 1, Table 9 defaults): resumable, cached, deterministic given the seed.

One generation: keep the `parents` fittest distinct individuals, make
`crossover_offspring` children by crossover and `mutation_offspring` by
mutation, and the next population is parents ∪ crossover ∪ mutation
(12 + 4 + 16 = 32). Generation 0 is the initial individual plus mutations of
it (brute-force ablation: random per-layer individuals). `generations` counts
the breeding rounds after generation 0.

- Mutation (Eq. 9–10): every control point moves by an integer δx with
  |δx| ≤ M_x and by δy with |δy| ≤ M_y (0.1 steps), each drawn uniformly from
  the part of that range that stays inside the search space. x obeys Eq. 9's
  neighbour bound by construction: the points move one at a time (random
  order) and each new x lies strictly between its neighbours' x, both as they
  were and as they are now, so the child keeps Eq. 11's x order. A child that
  repeats a genome already in the next generation is redrawn (after
  `redraw_limit` draws a valid repeat is accepted).
- Crossover: two distinct parents swap one control point (brute force: one
  layer's scale); both children are scored and the better one is kept. Up to
  `crossover_tries` draws for a valid new child; if all fail, that slot is
  filled by one more mutation child instead.
- Every candidate goes through one `FitnessCache` (search/fitness_cache.py), keyed by (fitness context,
  canonical genome): no genome is ever scored twice.
- Racing (`GAConfig.racing`, search/racing.py): a generation's new candidates
  are scored on growing prefixes of the search set's questions and the ones
  clearly worse than the leader are dropped early; per-question scores are
  cached too. None (the default) is the plain GA above.
- All randomness comes from one `numpy.random.Generator` owned by the state.
  The state (population, cache, RNG state, history, best) is saved
  atomically after every generation, so `run(..., resume=True)` continues
  exactly where it stopped and ends with the same result and the same bytes.

Distributed fitness: each generation asks `fitness.evaluate` for ONE batch
(all new candidates of that generation). Run `run` on every rank with the same
seed: the GA is deterministic, so every rank proposes the same batch; the
fitness may split the examples (or the candidates) across ranks and
all-gather, as long as it returns identical numbers everywhere. Pass
`save=(rank == 0)` so only one rank writes the state file.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from repo_common.atomic import write_json_atomic
from search.fitness import Fitness, FitnessResult
from search.fitness_cache import FitnessCache
from search.genome import CurveGenome, Genome, LayerGenome, SearchSpace, genome_from_json
from search.racing import RaceCounts, RacingConfig, check_racing_fitness, prefix_mean, race
from search.typed_config import load_section

STATE_VERSION = 1
#: GAConfig fields a resumed search may change: they end the search, never change its path.
_BUDGET_FIELDS = ("generations", "patience")


@dataclass(frozen=True)
class GAConfig:
    """Genetic-algorithm settings; defaults are the paper's (Table 9)."""

    population: int = 32
    """Individuals per generation; must equal parents + crossover_offspring + mutation_offspring."""
    parents: int = 12
    """Fittest distinct individuals kept (and bred from) each generation."""
    generations: int = 20
    """Breeding rounds after the initial population."""
    mutation_offspring: int = 16
    """Children by mutation per generation."""
    crossover_offspring: int = 4
    """Children by crossover per generation."""
    crossover_tries: int = 4
    """Draws allowed to find one valid, new crossover child."""
    mutation_x: int = 2
    """M_x: largest integer step of a control point's x."""
    mutation_y_tenths: int = 2
    """M_y in tenths (2 = 0.2): largest step of a control point's y."""
    seed: int = 0
    """Seed of the search's single numpy Generator."""
    patience: int | None = None
    """Stop after this many generations without a better best (None: run all generations)."""
    redraw_limit: int = 100
    """Mutation draws before a valid duplicate is accepted (only tiny search spaces get there)."""
    racing: RacingConfig | None = None
    """Score candidates on growing question prefixes and drop the clearly worse (search/racing.py); None: plain GA."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "racing", RacingConfig.from_json(self.racing))  # a dict from a saved state
        fixed = ("seed", "patience", "racing")
        counts = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in fixed}
        bad = {k: v for k, v in counts.items() if not isinstance(v, int) or v < 0}
        if bad or self.parents < 1 or self.redraw_limit < 1:
            raise ValueError(f"GA settings must be non-negative integers (parents, redraw_limit >= 1), got {bad}")
        needed = self.parents + self.crossover_offspring + self.mutation_offspring
        if self.population < self.parents:
            raise ValueError(
                f"population {self.population} is smaller than parents {self.parents} (the parents are kept from "
                "each generation's population): change the counts so they add up, population = parents + "
                f"crossover_offspring + mutation_offspring = {needed}"
            )
        if self.population != needed:
            raise ValueError(
                f"population {self.population} != parents {self.parents} + crossover {self.crossover_offspring} "
                f"+ mutation {self.mutation_offspring}: change the counts so they add up"
            )
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 or None (off), got {self.patience}")


# ---------------------------------------------------------------- operators


def mutate_once(space: SearchSpace, genome: Genome, rng: np.random.Generator, config: GAConfig) -> Genome:
    """One mutation draw (Eq. 9–10) inside the search space.

    y: every point moves by at most M_y, inside [y_min, y_max]. x: the points move one at a time, in a random
    order (so neither direction wins when two neighbours compete for a gap); each new x is uniform over the
    integers within ±M_x of the old one, inside [0, L − 1], and strictly between its neighbours' x both before
    and after they moved. Independent ±M_x moves could let a point jump over its neighbour's old position (or
    collide with it), which Eq. 9 forbids; this way every child of a valid genome satisfies the bound and Eq. 11.
    """
    ys = np.asarray(genome.ys)
    my = config.mutation_y_tenths
    ys = ys + rng.integers(np.maximum(-my, space.y_min_tenths - ys), np.minimum(my, space.y_max_tenths - ys) + 1)
    if isinstance(genome, LayerGenome):
        return LayerGenome(tuple(int(y) for y in ys))
    before, xs, mx, last = genome.xs, list(genome.xs), config.mutation_x, len(genome.xs) - 1
    for k in rng.permutation(len(xs)):
        lo = 0 if k == 0 else max(before[k - 1], xs[k - 1]) + 1
        hi = space.num_layers - 1 if k == last else min(before[k + 1], xs[k + 1]) - 1
        lo, hi = max(lo, before[k] - mx), min(hi, before[k] + mx)
        if lo <= hi:  # always, for a valid genome: the old x itself is in range
            xs[k] = int(rng.integers(lo, hi + 1))
    return CurveGenome(tuple(xs), tuple(int(y) for y in ys))


def mutate(
    space: SearchSpace, genome: Genome, rng: np.random.Generator, config: GAConfig, avoid: set | None = None
) -> Genome:
    """A valid mutation child not in `avoid` (keys), redrawing repeated draws (and invalid ones: only an invalid
    parent can give those, since `mutate_once` keeps the bounds by construction)."""
    avoid = avoid or set()
    fallback = genome
    for _ in range(config.redraw_limit):
        child = mutate_once(space, genome, rng, config)
        if space.is_valid(child):
            if child.key() not in avoid:
                return child
            fallback = child
    return fallback


def crossover(a: Genome, b: Genome, index: int) -> tuple[Genome, Genome]:
    """Swap control point `index` (brute force: layer `index`) between two genomes; validity not checked."""
    if isinstance(a, CurveGenome) and isinstance(b, CurveGenome):
        xa, ya, xb, yb = list(a.xs), list(a.ys), list(b.xs), list(b.ys)
        xa[index], xb[index], ya[index], yb[index] = xb[index], xa[index], yb[index], ya[index]
        return CurveGenome(tuple(xa), tuple(ya)), CurveGenome(tuple(xb), tuple(yb))
    ya, yb = list(a.ys), list(b.ys)
    ya[index], yb[index] = yb[index], ya[index]
    return LayerGenome(tuple(ya)), LayerGenome(tuple(yb))


def crossover_candidates(
    space: SearchSpace, parents: list[Genome], rng: np.random.Generator, config: GAConfig, avoid: set
) -> list[Genome]:
    """The valid, new children (1 or 2) of the first successful of `crossover_tries` draws; [] if none."""
    if len(parents) < 2:
        return []
    genes = space.num_points if space.uses_curve else space.num_layers
    for _ in range(config.crossover_tries):
        i, j = rng.choice(len(parents), size=2, replace=False)
        children = crossover(parents[i], parents[j], int(rng.integers(genes)))
        keep: list[Genome] = []
        for child in children:
            if space.is_valid(child) and child.key() not in avoid and child not in keep:
                keep.append(child)
        if keep:
            return keep
    return []


def initial_population(space: SearchSpace, rng: np.random.Generator, config: GAConfig) -> list[Genome]:
    """Generation 0: the paper's initial individual plus mutations of it (brute force: random individuals)."""
    if not space.uses_curve:
        population: list[Genome] = []
        for _ in range(config.population):
            genome = space.random_layers(rng)
            for _ in range(config.redraw_limit):
                if genome not in population:
                    break
                genome = space.random_layers(rng)
            population.append(genome)
        return population
    start = space.initial()
    population = [start]
    for _ in range(config.population - 1):
        population.append(mutate(space, start, rng, config, {g.key() for g in population}))
    return population


# ---------------------------------------------------------------- state


@dataclass
class SearchState:
    """Everything a search needs to continue: saved after every generation."""

    space: SearchSpace
    config: GAConfig
    context: str
    rng: np.random.Generator
    population: list[Genome] = field(default_factory=list)
    cache: FitnessCache = field(default_factory=FitnessCache)
    generation: int = 0
    best: Genome | None = None
    stale: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    def fitness_of(self, genome: Genome) -> FitnessResult:
        result = self.cache.get(self.context, genome)
        if result is None:
            raise KeyError(f"genome {genome.to_json()} has not been scored")
        return result

    def selection_key(self, genome: Genome) -> tuple[float, ...]:
        """What selection maximises: the fitness; racing: (questions scored, fitness or prefix mean), so a
        dropped candidate ranks below every fully scored one, and below those dropped later."""
        if self.config.racing is None:
            return (self.fitness_of(genome).overall,)
        full = self.cache.get(self.context, genome)
        scores = self.cache.questions(self.context, genome)
        if not scores:
            raise KeyError(f"genome {genome.to_json()} has not been scored")
        return (len(scores), full.overall if full is not None else prefix_mean(scores))

    def ranked(self) -> list[Genome]:
        """Distinct members of the population, fittest first (ties keep population order)."""
        distinct = list(dict.fromkeys(self.population))
        if self.config.racing is None:
            return sorted(distinct, key=lambda g: -self.fitness_of(g).overall)
        return sorted(distinct, key=lambda g: tuple(-v for v in self.selection_key(g)))

    def done(self) -> bool:
        patience = self.config.patience
        return self.generation >= self.config.generations or (patience is not None and self.stale >= patience)

    def to_json(self) -> dict[str, Any]:
        config = asdict(self.config)
        if config["racing"] is None:
            del config["racing"]  # a plain search's state is byte for byte what it was before racing existed
        data = {
            "state_version": STATE_VERSION,
            "space": self.space.to_json(),
            "config": config,
            "context": self.context,
            "generation": self.generation,
            "stale": self.stale,
            "best": None if self.best is None else self.best.to_json(),
            "population": [g.to_json() for g in self.population],
            "history": self.history,
            "rng_state": self.rng.bit_generator.state,
            "cache": self.cache.to_json(),
        }
        if self.config.racing is not None:
            data["question_cache"] = self.cache.questions_to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchState:
        if data.get("state_version") != STATE_VERSION:
            raise ValueError(
                f"search state version {data.get('state_version')!r} is not {STATE_VERSION}: "
                "start a new search (delete the state file or pass another path)"
            )
        rng = np.random.Generator(getattr(np.random, data["rng_state"]["bit_generator"])())
        rng.bit_generator.state = data["rng_state"]
        cache = FitnessCache.from_json(data["cache"])
        cache.load_questions(data.get("question_cache", []))
        return cls(
            space=SearchSpace.from_json(data["space"]),
            config=load_section(GAConfig, "ga", data["config"], "its GA settings"),  # the config's own loader
            context=data["context"],
            rng=rng,
            population=[genome_from_json(g) for g in data["population"]],
            cache=cache,
            generation=data["generation"],
            best=None if data["best"] is None else genome_from_json(data["best"]),
            stale=data["stale"],
            history=data["history"],
        )

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_json())  # a full disk names the file

    @classmethod
    def load(cls, path: str | Path) -> SearchState:
        """The state saved at `path`; an unreadable file is a ValueError naming it and what to do."""
        path = Path(path)
        restart = "delete it to start the search over (or restore an intact copy to continue it)"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"search state {path} is not text ({err.reason}): {restart}") from err
        except json.JSONDecodeError as err:
            raise ValueError(
                f"search state {path} is not valid JSON ({err.msg}: line {err.lineno}, column {err.colno}): it is "
                f"truncated or corrupt; {restart}"
            ) from err
        except RecursionError:
            raise ValueError(
                f"search state {path} nests its JSON thousands of levels deep: not a state; {restart}"
            ) from None
        if not isinstance(data, dict):
            raise ValueError(f"search state {path} is not a JSON object: {restart}")  # noqa: TRY004  (user error)
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"search state {path} lacks or mangles {err}: {restart}") from err
        except ValueError as err:
            raise ValueError(f"search state {path}: {err}") from err


# ---------------------------------------------------------------- the search


@dataclass
class SearchResult:
    """The best individual found, how the search went, and where its time went (this call only)."""

    best: Genome
    fitness: FitnessResult
    scales: list[float]
    generations: int
    stopped_early: bool
    history: list[dict[str, Any]]
    evaluations: int
    timing: dict[str, float]
    questions_scored: int | None = None
    """Racing: (candidate, question) pairs scored over the whole search; None for the plain GA."""


def _evaluate(state: SearchState, fitness: Fitness, genomes: list[Genome], clock: dict[str, float]) -> tuple[int, int]:
    """Score the not-yet-cached genomes in ONE batch; returns (new evaluations, cache hits)."""
    pending: list[Genome] = []
    hits = 0
    for genome in genomes:
        if state.cache.get(state.context, genome) is not None or genome in pending:
            hits += 1
        else:
            pending.append(genome)
    state.cache.hits += hits
    state.cache.misses += len(pending)
    if pending:
        batch = [state.space.scales(g) for g in pending]
        start = time.perf_counter()
        results = fitness.evaluate(batch)
        clock["fitness_s"] += time.perf_counter() - start
        if len(results) != len(pending) or not all(isinstance(r, FitnessResult) for r in results):
            raise TypeError(
                f"fitness.evaluate returned {len(results)} items for {len(pending)} candidates: "
                "it must return one FitnessResult per scale vector, in order"
            )
        for genome, result in zip(pending, results):
            state.cache.put(state.context, genome, result)
    return len(pending), hits


def _evaluate_generation(
    state: SearchState, fitness: Fitness, genomes: list[Genome], clock: dict[str, float]
) -> tuple[int, int] | RaceCounts:
    """Score a generation's candidates: one batch (plain GA) or a race (`config.racing`)."""
    if state.config.racing is None:
        return _evaluate(state, fitness, genomes, clock)
    counts = race(state.cache, state.context, state.space, fitness, genomes, state.best, state.config.racing, clock)
    state.cache.hits += counts.hits
    state.cache.misses += counts.candidates
    return counts


def _record(state: SearchState, counts: tuple[int, int] | RaceCounts) -> None:
    """Update best-so-far, the no-improvement counter and the history after a generation."""
    ranked = state.ranked()
    leader = state.fitness_of(ranked[0]).overall  # racing: ranked first is always fully scored
    if state.best is None or leader > state.fitness_of(state.best).overall:
        state.best, state.stale = ranked[0], 0
    else:
        state.stale += 1
    overall = [state.selection_key(g)[-1] for g in state.population]  # racing: a dropped one's prefix mean
    racing = isinstance(counts, RaceCounts)
    evaluated, hits = (counts.candidates, counts.hits) if racing else counts
    entry = {
        "generation": state.generation,
        "best": state.fitness_of(state.best).overall,
        "population_best": leader,
        "population_mean": sum(overall) / len(overall),
        "evaluated": evaluated,
        "cache_hits": hits,
    }
    if racing:
        entry.update(questions_scored=counts.questions, dropped=counts.dropped, stage_questions=counts.stage_questions)
        if state.config.racing.exact_bound:
            entry["dropped_exact"] = counts.dropped_exact
    state.history.append(entry)


def load_resumable_state(path: Path, space: SearchSpace, config: GAConfig, context: str) -> SearchState:
    """The state saved at `path`, checked to continue this search: the same space, fitness context, racing and GA
    settings but the budget (a ValueError of one line naming what differs); it takes `config` from here on.

    `search run` calls it before writing anything, so a state the GA would refuse leaves the run's files as they were.
    """
    state = SearchState.load(path)
    if state.space != space:
        raise ValueError(f"{path} searched {state.space}, not {space}: pass the same space or a new state file")
    if state.context != context:
        raise ValueError(
            f"{path} was scored with fitness context {state.context!r}, not {context!r} (another model, search "
            "set, decoding, weights, metric or task.score): resume with the same ones, or use a new state file"
        )
    if state.config.racing != config.racing:
        raise ValueError(
            f"{path} was searched with {_describe_racing(state.config.racing)}, not {_describe_racing(config.racing)}: "
            "resume with the same ga.racing, or use a new state file"
        )
    changed = [
        f.name
        for f in fields(GAConfig)
        if f.name not in _BUDGET_FIELDS and getattr(state.config, f.name) != getattr(config, f.name)
    ]
    if changed:
        raise ValueError(f"{path} used other GA settings {changed}: only {list(_BUDGET_FIELDS)} may change on resume")
    state.config = config
    return state


def _describe_racing(racing: RacingConfig | None) -> str:
    return "the plain GA" if racing is None else f"racing { ({**asdict(racing), 'fractions': list(racing.fractions)}) }"


def run(
    space: SearchSpace,
    fitness: Fitness,
    config: GAConfig | None = None,
    *,
    context: str = "",
    state_path: str | Path | None = None,
    resume: bool = False,
    save: bool = True,
) -> SearchResult:
    """Run (or, with `resume` and an existing `state_path`, continue) the LPES search; return the best individual.

    `context` identifies what the fitness depends on (e.g. `fitness.context_key(model=…, data=…)`); it keys
    the cache and must match on resume. The state is written after every generation when `save` is true
    (set it only on rank 0 when distributed). `timing` in the result covers this call; cumulative times
    are kept beside the state in `<state_path>.timing.json`, outside the (byte-reproducible) state.
    """
    config = config or GAConfig()
    if config.racing is not None:
        check_racing_fitness(fitness)
    wall = time.perf_counter()
    clock = {"fitness_s": 0.0, "state_io_s": 0.0}
    path = Path(state_path) if state_path is not None else None

    def checkpoint(state: SearchState) -> None:
        if path is None or not save:
            return
        start = time.perf_counter()
        state.save(path)
        clock["state_io_s"] += time.perf_counter() - start

    if resume and path is not None and path.exists():
        state = load_resumable_state(path, space, config, context)
    else:
        rng = np.random.default_rng(config.seed)
        state = SearchState(space, config, context, rng, initial_population(space, rng, config))
        _record(state, _evaluate_generation(state, fitness, state.population, clock))
        checkpoint(state)

    while not state.done():
        parents = state.ranked()[: config.parents]
        avoid = {g.key() for g in parents}
        slots = []
        for _ in range(config.crossover_offspring):
            candidates = crossover_candidates(space, parents, state.rng, config, avoid)
            avoid.update(g.key() for g in candidates)
            if candidates:
                slots.append(candidates)
        mutants = []
        for _ in range(config.mutation_offspring + config.crossover_offspring - len(slots)):
            child = mutate(space, parents[int(state.rng.integers(len(parents)))], state.rng, config, avoid)
            avoid.add(child.key())
            mutants.append(child)
        counts = _evaluate_generation(state, fitness, [g for slot in slots for g in slot] + mutants, clock)
        winners = [max(slot, key=state.selection_key) for slot in slots]
        state.population = parents + winners + mutants
        state.generation += 1
        _record(state, counts)
        checkpoint(state)

    timing = {**clock, "wall_s": time.perf_counter() - wall}
    timing["bookkeeping_s"] = timing["wall_s"] - timing["fitness_s"] - timing["state_io_s"]
    if path is not None and save:
        _accumulate_timing(path, timing)
    best = state.best
    return SearchResult(
        best=best,
        fitness=state.fitness_of(best),
        scales=space.scales(best),
        generations=state.generation,
        stopped_early=state.generation < config.generations,
        history=list(state.history),
        evaluations=sum(1 for ctx, _ in state.cache.entries if ctx == context),
        timing=timing,
        questions_scored=None
        if config.racing is None
        else sum(len(r) for (ctx, _), (_, r) in state.cache.question_entries.items() if ctx == context),
    )


def _accumulate_timing(path: Path, timing: dict[str, float]) -> None:
    sidecar = path.with_name(path.name + ".timing.json")
    total = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    write_json_atomic(sidecar, {k: total.get(k, 0.0) + v for k, v in timing.items()})
