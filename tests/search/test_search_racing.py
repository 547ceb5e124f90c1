"""Racing (search/racing.py): equal to the plain GA when nothing can be dropped, drops a clearly bad candidate early
and spends fewer evaluations, reuses per-question scores, resumes exactly, records the choice and refuses to change it."""

import json

import numpy as np
import pytest

from search.config import ConfigError, SearchConfig
from search.fitness import FitnessResult, SyntheticFitness, SyntheticQuestionFitness
from search.fitness_cache import FitnessCache
from search.ga import GAConfig, SearchState, run
from search.genome import CurveGenome, SearchSpace
from search.racing import RacingConfig, cannot_beat, race
from search.scale_file_writer import ScaleFile, load_scale_file, search_section, write_scale_file

SPACE = SearchSpace(10, num_points=3)
OPTIMUM = CurveGenome((0, 3, 9), (20, 10, 13))
TARGET = SPACE.scales(OPTIMUM)
QUESTIONS = 16
RACING = RacingConfig(fractions=(0.25, 0.5, 1.0), min_questions=4)
EXACT = RacingConfig(fractions=(0.5, 0.75, 1.0), min_questions=4, exact_bound=True)  # stages at 8 and 12
ONLY_EXACT = RacingConfig(fractions=(0.25, 0.5, 0.75, 1.0), min_questions=10**6, exact_bound=True)  # no bootstrap


class BlindStart(SyntheticQuestionFitness):
    """The first `blind` questions score 0 for every candidate: no race can drop anyone before they are passed."""

    def __init__(self, blind: int, **kwargs):
        super().__init__(TARGET, num_questions=QUESTIONS, spread=0.2, **kwargs)
        self.blind = blind

    def _score(self, scales, start, stop):
        rows = super()._score(scales, start, stop)
        zero = FitnessResult(0.0, {"begin": 0.0, "middle": 0.0, "end": 0.0})
        return [[zero if start + q < self.blind else r for q, r in enumerate(row)] for row in rows]


class Crashing(SyntheticQuestionFitness):
    """Raises at its `fail_at`-th scoring call (a simulated kill, mid-generation when it falls between stages)."""

    def __init__(self, fail_at=None):
        super().__init__(TARGET, num_questions=QUESTIONS, spread=0.2)
        self.fail_at = fail_at

    def evaluate_questions(self, scales, start, stop):
        if self.fail_at is not None and self.calls >= self.fail_at:
            self.crashed_at = start
            raise RuntimeError("simulated crash")
        return super().evaluate_questions(scales, start, stop)


def _without_race_counts(history):
    return [
        {k: v for k, v in line.items() if k not in ("questions_scored", "dropped", "dropped_exact", "stage_questions")}
        for line in history
    ]


def _scale_file(result, config, path):
    section = search_section(config, SyntheticFitness(TARGET).weights, "0" * 64, result.generations, 0.0)
    model = {"name": "synthetic", "config_sha256": "0" * 64}
    return write_scale_file(path, ScaleFile.from_genome(SPACE, result.best, result.fitness, model, section))


@pytest.mark.parametrize("racing", [RACING, EXACT], ids=["bootstrap", "bootstrap+exact_bound"])
def test_racing_equals_the_plain_ga_when_nothing_can_be_dropped(tmp_path, racing):
    """Stages at 4 and 8 questions, all of which score alike (0, the top score): every candidate reaches the whole
    set, so the race must give the plain GA's search exactly (same genomes, fitness, history, scale file).
    (EXACT's stages are at 8 and 12 questions: 12 blind ones.)"""
    blind = 8 if racing is RACING else 12
    plain_config = GAConfig(seed=3, generations=5)
    racing_config = GAConfig(seed=3, generations=5, racing=racing)
    plain = run(SPACE, BlindStart(blind=blind), plain_config, state_path=tmp_path / "plain.json")
    raced = run(SPACE, BlindStart(blind=blind), racing_config, state_path=tmp_path / "raced.json")
    assert raced.best == plain.best and raced.fitness == plain.fitness and raced.scales == plain.scales
    assert _without_race_counts(raced.history) == plain.history
    assert [line["dropped"] for line in raced.history] == [0] * 6
    assert raced.questions_scored == plain.evaluations * QUESTIONS
    plain_state, raced_state = (SearchState.load(tmp_path / n) for n in ("plain.json", "raced.json"))
    assert raced_state.population == plain_state.population
    assert raced_state.rng.bit_generator.state == plain_state.rng.bit_generator.state
    plain_file = json.loads(_scale_file(plain, plain_config, tmp_path / "plain-scales.json").read_text())
    raced_file = json.loads(_scale_file(raced, racing_config, tmp_path / "raced-scales.json").read_text())
    assert raced_file["search"]["ga"].pop("racing") == {
        "fractions": list(racing.fractions),
        "confidence": 0.95,
        "resamples": 1000,
        "min_questions": 4,
        "seed": 0,
        "exact_bound": racing.exact_bound,
    }
    assert plain_file["search"]["ga"].pop("racing") is None
    assert raced_file == plain_file
    # a race whose early stages can see the differences does drop candidates on the same search
    assert sum(line["dropped"] for line in run(SPACE, BlindStart(blind=0), racing_config).history) > 0


def test_a_clearly_bad_candidate_is_dropped_after_the_first_stage():
    fitness = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS, spread=0.2)
    cache, clock = FitnessCache(), {"fitness_s": 0.0}
    race(cache, "", SPACE, fitness, [OPTIMUM], None, RACING, clock)  # the incumbent: fully scored
    near, bad = CurveGenome((0, 3, 9), (20, 11, 13)), CurveGenome((0, 5, 9), (10, 20, 20))
    before = fitness.question_evaluations
    counts = race(cache, "", SPACE, fitness, [bad, near, OPTIMUM], OPTIMUM, RACING, clock)
    assert (counts.candidates, counts.hits, counts.dropped) == (2, 1, 1)
    assert len(cache.questions("", bad)) == 4 and cache.get("", bad) is None  # stopped at the first stage
    assert len(cache.questions("", near)) == QUESTIONS and cache.get("", near) is not None
    assert counts.questions == fitness.question_evaluations - before == 4 + QUESTIONS < 2 * QUESTIONS
    assert cache.get("", near) == fitness.evaluate([SPACE.scales(near)])[0]  # a survivor's plain-GA result


def test_racing_spends_fewer_evaluations_than_the_plain_ga_on_the_same_budget():
    plain_fitness, racing_fitness = (SyntheticQuestionFitness(TARGET, num_questions=40, spread=0.3) for _ in "ab")
    plain = run(SPACE, plain_fitness, GAConfig(seed=0, generations=6))
    raced = run(SPACE, racing_fitness, GAConfig(seed=0, generations=6, racing=RacingConfig()))
    assert racing_fitness.evaluations == 0  # racing scores through evaluate_questions only
    assert raced.questions_scored == racing_fitness.question_evaluations
    assert raced.questions_scored < 0.7 * plain_fitness.evaluations * 40
    assert raced.fitness.overall == pytest.approx(plain.fitness.overall, abs=0.02)  # both near the optimum


def test_cached_question_scores_are_reused_and_survive_the_state_file(tmp_path):
    fitness = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS, spread=0.2)
    cache, clock = FitnessCache(), {"fitness_s": 0.0}
    bad = CurveGenome((0, 5, 9), (10, 20, 20))
    race(cache, "ctx", SPACE, fitness, [OPTIMUM], None, RACING, clock)
    assert race(cache, "ctx", SPACE, fitness, [bad], OPTIMUM, RACING, clock).dropped == 1
    # met again with nobody to lose against, it finishes: only the questions it has not been scored on yet
    before = fitness.question_evaluations
    counts = race(cache, "ctx", SPACE, fitness, [bad], None, RACING, clock)
    assert counts.questions == fitness.question_evaluations - before == QUESTIONS - 4
    assert cache.get("ctx", bad) == fitness.evaluate([SPACE.scales(bad)])[0]
    assert race(cache, "ctx", SPACE, fitness, [bad, OPTIMUM], None, RACING, clock).questions == 0  # all cached
    # a state round trip keeps every per-question score
    state = SearchState(SPACE, GAConfig(racing=RACING), "ctx", __import__("numpy").random.default_rng(0), [OPTIMUM])
    state.cache = cache
    state.save(tmp_path / "s.json")
    again = SearchState.load(tmp_path / "s.json").cache
    assert again.question_entries == cache.question_entries and again.entries == cache.entries
    with pytest.raises(ValueError, match="must follow on"):
        cache.extend_questions("ctx", bad, 3, [])


@pytest.mark.parametrize("racing", [RACING, EXACT], ids=["bootstrap", "bootstrap+exact_bound"])
def test_resume_after_a_crash_mid_race_equals_an_uninterrupted_run(tmp_path, racing):
    config = GAConfig(seed=7, generations=6, racing=racing)
    whole = tmp_path / "whole.json"
    reference = run(SPACE, Crashing(), config, state_path=whole)
    assert not racing.exact_bound or sum(line["dropped_exact"] for line in reference.history) > 0  # the rule acts

    broken = tmp_path / "broken.json"
    crashing = Crashing(fail_at=8)  # 3 stages a generation here: the 9th call is generation 2's last stage
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(SPACE, crashing, config, state_path=broken)
    assert crashing.crashed_at > 0  # a later stage: the generation's first stage was scored, then lost
    saved = SearchState.load(broken)
    assert saved.generation == 1
    assert saved.generation == len(saved.history) - 1
    resumed = run(SPACE, Crashing(), config, state_path=broken, resume=True)
    assert (resumed.best, resumed.fitness, resumed.history) == (reference.best, reference.fitness, reference.history)
    assert broken.read_bytes() == whole.read_bytes()


def test_the_state_records_the_choice_and_a_resume_refuses_another(tmp_path):
    plain_path, raced_path = tmp_path / "plain.json", tmp_path / "raced.json"
    fitness = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS)
    run(SPACE, fitness, GAConfig(generations=1), state_path=plain_path)
    run(SPACE, fitness, GAConfig(generations=1, racing=RACING), state_path=raced_path)
    plain, raced = json.loads(plain_path.read_text()), json.loads(raced_path.read_text())
    assert "racing" not in plain["config"] and "question_cache" not in plain  # the plain GA's state is unchanged
    assert raced["config"]["racing"]["fractions"] == [0.25, 0.5, 1.0] and raced["question_cache"]
    assert SearchState.load(raced_path).config.racing == RACING
    with pytest.raises(ValueError, match=r"searched with the plain GA, not racing \{'fractions'") as refused:
        run(SPACE, fitness, GAConfig(generations=2, racing=RACING), state_path=plain_path, resume=True)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="searched with racing .* not the plain GA: resume with the same ga.racing"):
        run(SPACE, fitness, GAConfig(generations=2), state_path=raced_path, resume=True)
    other = GAConfig(generations=2, racing=RacingConfig(fractions=(0.5, 1.0), min_questions=4))
    with pytest.raises(ValueError, match=r"racing \{'fractions': \[0.25, 0.5, 1.0\].*not racing \{'fractions': \[0.5"):
        run(SPACE, fitness, other, state_path=raced_path, resume=True)
    assert run(SPACE, fitness, GAConfig(generations=2, racing=RACING), state_path=raced_path, resume=True).generations


def test_racing_config_checks_and_the_search_config_option(tmp_path):
    config = SearchConfig.from_dict({"ga": {"racing": {"fractions": [0.1, 0.5, 1], "confidence": 0.9}}})
    assert config.ga.racing == RacingConfig(fractions=(0.1, 0.5, 1.0), confidence=0.9)
    assert SearchConfig.from_dict(config.to_dict()) == config  # NAME.config.yaml replays it
    assert "exact_bound" not in config.to_dict()["ga"]["racing"]  # off: written as before the option existed
    exact = SearchConfig.from_dict({"ga": {"racing": {"exact_bound": True}}})
    assert exact.ga.racing.exact_bound and SearchConfig.from_dict(exact.to_dict()) == exact
    assert SearchConfig.from_dict({}).ga.racing is None  # the plain GA by default
    assert RacingConfig(fractions=(0.25, 0.5, 1.0)).stages(10) == [3, 5, 10]
    assert RacingConfig(fractions=(0.1, 0.2, 1.0)).stages(4) == [1, 4]  # repeats merged
    for racing, message in (
        ({"fractions": [0.5, 0.9]}, "end with 1.0"),
        ({"fractions": [0.5, 0.25, 1.0]}, "must increase"),
        ({"confidence": 1.0}, "confidence must lie in"),
        ({"speed": 2}, "speed"),
    ):
        with pytest.raises(ConfigError, match=message) as refused:
            SearchConfig.from_dict({"ga": {"racing": racing}}, source="x.yaml")
        assert "\n" not in str(refused.value)
    with pytest.raises(TypeError, match="ga.racing needs a fitness that scores single questions"):
        run(SPACE, SyntheticFitness(TARGET), GAConfig(generations=1, racing=RACING))
    # the scale file of a racing search is valid and says how it was searched
    result = run(SPACE, SyntheticQuestionFitness(TARGET), GAConfig(generations=1, racing=RACING))
    path = _scale_file(result, GAConfig(generations=1, racing=RACING), tmp_path / "scales.json")
    assert load_scale_file(path).search["ga"]["racing"]["confidence"] == 0.95


def test_exact_bound_drops_a_candidate_that_cannot_catch_up_without_statistics():
    """No bootstrap here (min_questions is out of reach): the bad candidate is dropped after 4 questions because even
    the top score (0) on the 12 left leaves it below the incumbent's sum; the optimum itself is never dropped."""
    fitness = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS, spread=0.2)
    cache, clock = FitnessCache(), {"fitness_s": 0.0}
    incumbent = CurveGenome((0, 3, 9), (20, 11, 13))
    race(cache, "", SPACE, fitness, [incumbent], None, ONLY_EXACT, clock)
    bad = CurveGenome((0, 5, 9), (10, 20, 20))
    counts = race(cache, "", SPACE, fitness, [bad, OPTIMUM], incumbent, ONLY_EXACT, clock)
    assert (counts.dropped, counts.dropped_exact) == (1, 1)
    assert counts.stage_questions == [8, 4, 4, 4]  # both at 4 questions, then the optimum alone
    assert len(cache.questions("", bad)) == 4 and cache.get("", bad) is None
    assert cache.get("", OPTIMUM) == fitness.evaluate([SPACE.scales(OPTIMUM)])[0]
    assert RACING.exact_bound is False  # without it the same race keeps the bad candidate to the bootstrap's stage
    assert race(FitnessCache(), "", SPACE, fitness, [bad], None, ONLY_EXACT, clock).dropped == 0  # no incumbent


def test_exact_bound_never_drops_a_candidate_that_would_beat_the_incumbent():
    """Random batches against a middling incumbent: every candidate whose full fitness beats the incumbent's is
    scored in full with the plain GA's result, and the bound does drop some of the others."""
    fitness = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS, spread=0.2)
    rng = np.random.default_rng(5)
    incumbent = CurveGenome((0, 4, 9), (18, 12, 14))
    dropped = 0
    for _ in range(5):
        batch = []
        while len(batch) < 12:
            middle = int(rng.integers(1, 9))
            genome = CurveGenome((0, middle, 9), tuple(int(y) for y in rng.integers(10, 21, 3)))
            if genome not in batch and genome != incumbent:
                batch.append(genome)
        cache = FitnessCache()
        race(cache, "", SPACE, fitness, [incumbent], None, ONLY_EXACT, {"fitness_s": 0.0})
        counts = race(cache, "", SPACE, fitness, batch, incumbent, ONLY_EXACT, {"fitness_s": 0.0})
        plain = dict(zip(batch, fitness.evaluate([SPACE.scales(g) for g in batch])))
        for genome, result in plain.items():
            if result.overall >= cache.get("", incumbent).overall:
                assert cache.get("", genome) == result
        dropped += counts.dropped_exact
    assert dropped > 0


def test_cannot_beat_is_strict_and_the_bound_is_checked():
    one = FitnessResult(1.0, {})
    half = FitnessResult(0.5, {})
    # 2 questions scored (1.5) + 2 left at the top score 1 = 3.5: a tie with 3.5 is not dropped, 3.5 + 1e-6 is
    assert not cannot_beat([one, half], 4, 1.0, 3.5)
    assert cannot_beat([one, half], 4, 1.0, 3.5 + 1e-6)
    assert not cannot_beat([one, half], 4, 1.0, 3.5 + 1e-12)  # within rounding: kept
    with pytest.raises(TypeError, match="exact_bound needs the fitness's question_score_max") as refused:
        no_bound = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS)
        del no_bound.question_score_max
        run(SPACE, no_bound, GAConfig(generations=1, racing=EXACT))
    assert "\n" not in str(refused.value)
    lying = SyntheticQuestionFitness(TARGET, num_questions=QUESTIONS)
    lying.question_score_max = -1.0  # every score is above it: the search stops instead of dropping on it
    with pytest.raises(ValueError, match=r"a question scored .* > the fitness's question_score_max -1.0"):
        run(SPACE, lying, GAConfig(generations=1, racing=EXACT))


def test_the_stages_are_named_in_questions_and_a_large_first_stage_gets_a_notice():
    default = RacingConfig()
    assert default.describe(16) == "racing in stages of 4, 8, 16 questions, none dropped before 8"
    assert default.first_stage_notice(16) is None and default.first_stage_notice(40) is None  # 10 <= 2 × 8
    notice = default.first_stage_notice(200)  # the paper's size: 50 questions before anyone can go
    assert notice.startswith("racing's first stage scores 50 of the 200 questions") and "\n" not in notice
    suggested = json.loads(notice.split("fractions ")[1].split(")")[0])
    assert suggested == [0.04, 0.08, 0.16, 0.32, 0.64, 1.0]
    following = RacingConfig(fractions=suggested)  # valid, and its first stage is min_questions itself
    assert following.stages(200)[0] == 8 and following.first_stage_notice(200) is None
    assert RacingConfig(fractions=(1.0,)).first_stage_notice(200) is None  # one stage: nothing to race
