"""Search space, GA operators (property tests), the GA on a known optimum, cache, resume, early stopping, Eq. 7,
the held-out default."""

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.methods.lpes.curves import CURVES
from search.config import HeldOutConfig, SearchConfig, load_config
from search.fitness import FitnessResult, SubsetWeights, SyntheticFitness, context_key
from search.ga import GAConfig, SearchState, crossover, crossover_candidates, mutate, mutate_once, run
from search.genome import CurveGenome, LayerGenome, SearchSpace, genome_from_json

CONFIG = GAConfig()


@st.composite
def curve_genomes(draw):
    num_layers = draw(st.integers(8, 48))
    count = draw(st.integers(2, 5))
    xs = tuple(sorted(draw(st.sets(st.integers(0, num_layers - 1), min_size=count, max_size=count))))
    ys = tuple(draw(st.lists(st.integers(10, 20), min_size=count, max_size=count)))
    return SearchSpace(num_layers, num_points=count), CurveGenome(xs, ys)


def test_initial_individual_is_the_papers():
    assert SearchSpace(32, num_points=4).initial() == CurveGenome((0, 10, 21, 31), (15, 15, 15, 15))
    assert SearchSpace(6, num_points=3).initial().xs == (0, 3, 5)  # 2.5 rounds half up
    assert SearchSpace(5, num_points=5).initial().xs == (0, 1, 2, 3, 4)
    assert SearchSpace(16).scales(SearchSpace(16).initial()) == [1.5] * 16


def test_genome_json_round_trip_and_canonical_key():
    for genome in (CurveGenome((0, 4, 9), (10, 17, 20)), LayerGenome((10, 11, 20))):
        text = json.dumps(genome.to_json())
        again = genome_from_json(json.loads(text))
        assert again == genome and again.key() == genome.key() and hash(again) == hash(genome)
    assert CurveGenome((0, 4, 9), (10, 17, 20)).control_points() == [[0, 1.0], [4, 1.7], [9, 2.0]]
    with pytest.raises(ValueError, match="unknown genome"):
        genome_from_json({"kind": "tree"})


@pytest.mark.parametrize(
    ("genome", "message"),
    [
        (CurveGenome((0, 5, 5, 9), (15,) * 4), r"not strictly increasing \(Eq. 11\)"),
        (CurveGenome((0, 5, 9, 12), (15,) * 4), r"outside \[0, 11\]"),
        (CurveGenome((0, 5, 9, 11), (15, 21, 15, 9)), r"outside \[10, 20\]"),
        (CurveGenome((0, 11), (15, 15)), "needs 4 control points"),
        (LayerGenome((15,) * 12), "expected a curve genome"),
    ],
)
def test_invalid_genomes_name_the_broken_constraint(genome, message):
    space = SearchSpace(12)
    assert not space.is_valid(genome)
    with pytest.raises(ValueError, match=message):
        space.check(genome)


def test_search_space_and_config_errors():
    with pytest.raises(ValueError, match="use at most 3 points"):
        SearchSpace(3, num_points=4)
    with pytest.raises(ValueError, match="unknown curve"):
        SearchSpace(8, curve="spline")
    with pytest.raises(ValueError, match="change the counts so they add up"):
        GAConfig(population=30)


@settings(max_examples=60, deadline=None)
@given(curve_genomes(), st.integers(0, 2**32 - 1))
def test_mutation_stays_in_bounds_and_valid(case, seed):
    space, genome = case
    rng = np.random.default_rng(seed)
    draw = mutate_once(space, genome, rng, CONFIG)
    assert all(abs(a - b) <= CONFIG.mutation_x for a, b in zip(draw.xs, genome.xs))  # Eq. 9
    assert all(abs(a - b) <= CONFIG.mutation_y_tenths for a, b in zip(draw.ys, genome.ys))  # Eq. 10
    assert all(0 <= x < space.num_layers for x in draw.xs) and all(10 <= y <= 20 for y in draw.ys)
    child = mutate(space, genome, rng, CONFIG, avoid={genome.key()})
    assert space.is_valid(child)
    assert all(abs(a - b) <= CONFIG.mutation_x for a, b in zip(child.xs, genome.xs))


@settings(max_examples=60, deadline=None)
@given(curve_genomes(), st.integers(2, 12), st.integers(0, 2**32 - 1))
def test_crossover_offspring_are_valid_and_new(case, num_parents, seed):
    space, genome = case
    rng = np.random.default_rng(seed)
    parents = [genome]  # a random valid genome and a chain of mutations of it
    for _ in range(num_parents - 1):
        parents.append(mutate(space, parents[-1], rng, CONFIG, {p.key() for p in parents}))
    avoid = {p.key() for p in parents}
    children = crossover_candidates(space, parents, rng, CONFIG, avoid)
    assert len(children) <= 2
    points = {(x, y) for p in parents for x, y in zip(p.xs, p.ys)}
    for child in children:
        assert space.is_valid(child) and child.key() not in avoid
        assert set(zip(child.xs, child.ys)) <= points  # every control point comes from a parent


def neighbour_bound_breaks(space, parent, child, max_step=CONFIG.mutation_x):
    """Why `child` is not a legal move of `parent` (Eq. 9–11); empty when it is.

    A moved x must lie strictly between its neighbours' x, both the parent's and the child's (whatever order
    the points moved in), within ±max_step (M_x; None for crossover) and [0, L − 1]; y stays in the box.
    Written out here, independent of `mutate_once`, so that a wrong bound in the operator cannot hide in it.
    """
    p, c, last = parent.xs, child.xs, len(parent.xs) - 1
    found = [f"x {c} not strictly increasing"] if any(b <= a for a, b in pairwise(c)) else []
    for k in (k for k in range(last + 1) if c[k] != p[k]):
        lo = -1 if k == 0 else max(p[k - 1], c[k - 1])
        hi = space.num_layers if k == last else min(p[k + 1], c[k + 1])
        if not lo < c[k] < hi or (max_step is not None and abs(c[k] - p[k]) > max_step):
            found.append(f"x_{k} {p[k]} -> {c[k]} outside ({lo}, {hi}) or beyond ±{max_step}")
    if any(not space.y_min_tenths <= y <= space.y_max_tenths for y in child.ys):
        found.append(f"y {child.ys} outside the box")
    return found


def random_curve_genome(space, rng):
    """Uniform over distinct sorted x (often crowded at small L, where neighbours compete) and grid y."""
    xs = np.sort(rng.choice(space.num_layers, size=space.num_points, replace=False))
    return CurveGenome(tuple(int(x) for x in xs), tuple(int(y) for y in rng.integers(10, 21, size=space.num_points)))


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_every_child_keeps_the_neighbour_bound_for_every_layer_count(curve):
    """Eq. 9 by construction, for L = 4..64 and 2..5 points: the old independent ±M_x draw broke it for
    about 20% of random genomes' children (up to ~50% at L = 8), which `is_valid` alone did not catch."""
    rng = np.random.default_rng(12)
    for num_layers in range(4, 65):
        for num_points in range(2, min(5, num_layers) + 1):
            space = SearchSpace(num_layers, num_points=num_points, curve=curve)
            parents = [space.initial()] + [random_curve_genome(space, rng) for _ in range(3)]
            for parent in list(parents):
                seed = int(rng.integers(2**32))
                draw = mutate_once(space, parent, np.random.default_rng(seed), CONFIG)
                assert draw == mutate_once(space, parent, np.random.default_rng(seed), CONFIG)  # seeded
                assert not neighbour_bound_breaks(space, parent, draw), (parent, draw)
                child = mutate(space, parent, rng, CONFIG, {p.key() for p in parents})
                assert space.is_valid(child) and not neighbour_bound_breaks(space, parent, child), (parent, child)
                parents.append(child)
            avoid = {p.key() for p in parents}
            for child in crossover_candidates(space, parents, rng, CONFIG, avoid):
                assert space.is_valid(child) and child.key() not in avoid
                # the GA keeps a child with one control point swapped in: it must fit between its new neighbours
                assert any(
                    sum(a != b for a, b in zip(p.xs, child.xs)) <= 1
                    and not neighbour_bound_breaks(space, p, child, max_step=None)
                    for p in parents
                ), child


def test_crossover_swaps_exactly_one_control_point():
    a, b = CurveGenome((0, 3, 7), (10, 11, 12)), CurveGenome((0, 5, 7), (20, 19, 18))
    assert crossover(a, b, 1) == (CurveGenome((0, 5, 7), (10, 19, 12)), CurveGenome((0, 3, 7), (20, 11, 18)))
    assert crossover(LayerGenome((10, 11)), LayerGenome((20, 19)), 0) == (LayerGenome((20, 11)), LayerGenome((10, 19)))


def test_brute_force_mutation_stays_on_the_grid():
    space = SearchSpace(9, curve="none")
    rng = np.random.default_rng(3)
    genome = space.random_layers(rng)
    for _ in range(50):
        genome = mutate(space, genome, rng, CONFIG)
        assert space.is_valid(genome)


# ---------------------------------------------------------------- the search

TARGET_SPACE = SearchSpace(10, num_points=3)
TARGET = TARGET_SPACE.scales(CurveGenome((0, 3, 9), (20, 10, 13)))


@pytest.mark.slow  # a whole GA run (~4 s): the fast suite stays under 5 min
def test_ga_finds_the_known_optimum_deterministically():
    first = run(TARGET_SPACE, SyntheticFitness(TARGET), GAConfig(seed=0))
    assert first.fitness.overall == 0.0 and first.scales == pytest.approx(TARGET, abs=1e-12)
    again = run(TARGET_SPACE, SyntheticFitness(TARGET), GAConfig(seed=0))
    assert again.best == first.best and again.history == first.history
    other = run(TARGET_SPACE, SyntheticFitness(TARGET), GAConfig(seed=1))
    assert other.fitness.overall >= -1e-3  # stated tolerance for other seeds: within 1e-3 of the optimum
    assert first.history[-1]["best"] >= first.history[0]["best"]


def test_brute_force_search_runs_with_the_same_budget():
    space = SearchSpace(8, curve="none")
    target = [1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 1.5, 1.1]
    result = run(space, SyntheticFitness(target), GAConfig(seed=0))
    assert isinstance(result.best, LayerGenome) and result.fitness.overall >= -2e-3
    assert result.evaluations <= 32 + 20 * (16 + 2 * 4)


class CountingFitness(SyntheticFitness):
    """Records every batch; raises once `fail_at` batches have been scored (a simulated crash)."""

    def __init__(self, target, fail_at=None):
        super().__init__(target)
        self.fail_at, self.batches = fail_at, []

    def evaluate(self, scales):
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeError("simulated crash")
        self.batches.append(len(scales))
        return super().evaluate(scales)


def test_cache_scores_every_genome_once_and_one_batch_per_generation(tmp_path):
    fitness = CountingFitness(TARGET)
    result = run(TARGET_SPACE, fitness, GAConfig(generations=6), state_path=tmp_path / "s.json")
    assert fitness.calls == 7  # generation 0 + 6 breeding rounds, one batch each
    assert fitness.evaluations == result.evaluations == sum(h["evaluated"] for h in result.history)
    state = SearchState.load(tmp_path / "s.json")
    assert len({key for _, key in state.cache.entries}) == result.evaluations
    assert len(state.population) == 32
    assert sum(h["cache_hits"] for h in result.history) > 0  # re-proposed genomes were served from the cache
    # Finished state + resume: nothing is scored again.
    assert run(TARGET_SPACE, fitness, GAConfig(generations=6), state_path=tmp_path / "s.json", resume=True).best
    assert fitness.calls == 7
    # A longer budget continues from the saved generation only.
    longer = run(TARGET_SPACE, fitness, GAConfig(generations=8), state_path=tmp_path / "s.json", resume=True)
    assert fitness.calls == 9 and longer.generations == 8


def test_resume_after_a_crash_equals_an_uninterrupted_run(tmp_path):
    config = GAConfig(seed=7, generations=8)
    whole = tmp_path / "whole.json"
    reference = run(TARGET_SPACE, CountingFitness(TARGET), config, state_path=whole)

    broken = tmp_path / "broken.json"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(TARGET_SPACE, CountingFitness(TARGET, fail_at=4), config, state_path=broken)
    assert SearchState.load(broken).generation == 3
    resumed_fitness = CountingFitness(TARGET)
    resumed = run(TARGET_SPACE, resumed_fitness, config, state_path=broken, resume=True)
    assert resumed_fitness.calls == 5  # only generations 4..8
    assert (resumed.best, resumed.fitness, resumed.history) == (reference.best, reference.fitness, reference.history)
    assert broken.read_bytes() == whole.read_bytes()


def test_resume_refuses_another_search(tmp_path):
    path = tmp_path / "s.json"
    run(TARGET_SPACE, SyntheticFitness(TARGET), GAConfig(generations=1), state_path=path, context="a")
    with pytest.raises(ValueError, match="fitness context 'a', not 'b'"):
        run(TARGET_SPACE, SyntheticFitness(TARGET), GAConfig(generations=1), state_path=path, resume=True, context="b")
    with pytest.raises(ValueError, match=r"other GA settings \['seed'\]"):
        run(
            TARGET_SPACE,
            SyntheticFitness(TARGET),
            GAConfig(generations=1, seed=3),
            state_path=path,
            resume=True,
            context="a",
        )


class FlatFitness:
    """Every candidate scores the same: nothing ever improves."""

    def evaluate(self, scales):
        return [FitnessResult(0.0, {"begin": 0.0, "middle": 0.0, "end": 0.0}) for _ in scales]


def test_early_stopping_after_patience_generations_without_improvement():
    result = run(TARGET_SPACE, FlatFitness(), GAConfig(patience=3))
    assert result.stopped_early and result.generations == 3
    assert run(TARGET_SPACE, FlatFitness(), GAConfig(generations=5)).generations == 5  # off by default


def test_fitness_returning_the_wrong_count_is_a_clear_error():
    class Short:
        def evaluate(self, scales):
            return []

    with pytest.raises(TypeError, match="one FitnessResult per scale vector"):
        run(TARGET_SPACE, Short(), GAConfig(generations=1))


# ---------------------------------------------------------------- Eq. 7


def test_eq7_weights_default_and_combination():
    weights = SubsetWeights()
    assert weights.as_dict() == {"begin": 0.2, "middle": 0.3, "end": 0.5}
    assert weights.combine({"begin": 1.0, "middle": 0.5, "end": 0.2}) == pytest.approx(0.2 + 0.15 + 0.1)
    with pytest.raises(ValueError, match="must sum to 1"):
        SubsetWeights(0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match=">= 0"):
        SubsetWeights(-0.2, 0.7, 0.5)
    with pytest.raises(ValueError, match=r"lack \['end'\]"):
        weights.combine({"begin": 1.0, "middle": 1.0})
    with pytest.raises(ValueError, match="finite"):
        FitnessResult(float("nan"))


def test_synthetic_fitness_optimum_and_context_key():
    fitness = SyntheticFitness([1.0, 1.5, 2.0, 1.2, 1.1, 1.9])
    best, worse = fitness.evaluate([[1.0, 1.5, 2.0, 1.2, 1.1, 1.9], [1.0, 1.5, 2.0, 1.2, 1.1, 1.0]])
    assert best.overall == 0.0 and worse.per_subset["end"] < 0 and worse.per_subset["begin"] == 0
    assert context_key(model="a", data="b") == context_key(data="b", model="a") != context_key(model="a")


# ---------------------------------------------------------------- paper defaults


def test_held_out_check_defaults_to_the_papers_500_examples():
    """The paper evaluates the final scales on 500 held-out examples; only the tiny smoke preset uses fewer."""
    assert HeldOutConfig().num_examples == SearchConfig().held_out.num_examples == 500
    configs = Path(__file__).resolve().parents[2] / "configs" / "search"
    for name in ("lpes.yaml", "lpes-vicuna-mdqa10.yaml", "lpes-qwen-kv50.yaml"):
        assert load_config(configs / name).held_out.num_examples == 500, name
    assert load_config(configs / "tiny.yaml").held_out.num_examples == SearchConfig.tiny().held_out.num_examples == 4
