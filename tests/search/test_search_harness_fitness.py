"""The harness-scored fitness: begin/middle/end search sets, Eq. 7 from the harness's own outputs, held-out sets."""

import hashlib

import pytest
import torch
from float_checks import assert_close_to_scale

from evaluation.generation import DecodeSettings, generate
from evaluation.model_identity import weights_fingerprint
from evaluation.model_loading import tiny_default
from evaluation.sample_data import NQ_OPEN_ORACLE
from evaluation.tasks import build_task
from search.fitness import SubsetWeights
from search.harness_fitness import HarnessFitness, evaluate_held_out, subset_positions
from search.policy import scaled_model

NQ = NQ_OPEN_ORACLE
SETTINGS = DecodeSettings(max_new_tokens=3, stop_strings=("\n",), batch_size=4)
SCALES = [1.0, 1.3, 2.0, 1.1]


def hash_score(row_id: str, prediction: str) -> float:
    """A stand-in metric with varied values: the tiny random model never answers right, so EM is always 0."""
    return float(hashlib.sha256(f"{row_id}|{prediction}".encode()).digest()[0] % 2)


class HashScored(HarnessFitness):
    """The harness fitness with `hash_score` in place of the task metric."""

    def score_record(self, record):
        return hash_score(record["id"], record["prediction"])


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_default(seed=0)


def test_subset_positions():
    assert subset_positions(10) == {"begin": 0, "middle": 4, "end": 9}
    assert subset_positions(20) == {"begin": 0, "middle": 9, "end": 19}
    assert subset_positions(3) == {"begin": 0, "middle": 1, "end": 2}
    with pytest.raises(ValueError, match="k >= 3"):
        subset_positions(2)


def test_search_set_is_paired_hashed_and_keyed(tiny):
    model, tokenizer = tiny
    fitness = HarnessFitness(model, tokenizer, "kv", {"num_keys": 5}, num_examples=2, settings=SETTINGS)
    assert fitness.positions == {"begin": 0, "middle": 2, "end": 4}
    assert len(fitness.prepared.rows) == 6 and {len(v) for v in fitness.subset_rows.values()} == {2}
    for name, rows in fitness.subset_rows.items():  # every example appears once in every subset
        assert sorted(fitness.prepared.rows[i]["example_id"] for i in rows) == fitness.example_ids
        assert {fitness.prepared.rows[i]["gold_position"] for i in rows} == {fitness.positions[name]}
    again = HarnessFitness(model, tokenizer, "kv", {"num_keys": 5}, num_examples=2, settings=SETTINGS)
    other_seed = HarnessFitness(model, tokenizer, "kv", {"num_keys": 5}, num_examples=2, seed=1, settings=SETTINGS)
    assert again.data_sha256 == fitness.data_sha256 != other_seed.data_sha256
    assert again.context == fitness.context != other_seed.context
    other_model, _ = tiny_default(seed=1)
    assert weights_fingerprint(other_model) != weights_fingerprint(model)
    assert HarnessFitness(other_model, tokenizer, "kv", {"num_keys": 5}, num_examples=2).context != fitness.context


def test_fitness_is_eq7_over_the_harness_generations(tiny):
    """Reference: plain `generate` on the prompt strings under the same scales, scored and weighted by hand."""
    model, tokenizer = tiny
    weights = SubsetWeights(0.1, 0.6, 0.3)
    fitness = HashScored(model, tokenizer, "kv", {"num_keys": 4}, num_examples=4, weights=weights, settings=SETTINGS)
    results = fitness.evaluate([SCALES, [1.0] * 4])
    rows = build_task("kv", num_keys=4, num_examples=4, gold_positions=[0, 1, 3]).build().to_list()
    for scales, result in zip([SCALES, [1.0] * 4], results):
        with scaled_model(model, scales):
            outputs = generate(model, tokenizer, [r["prompt"] for r in rows], SETTINGS)
        by_subset = {"begin": [], "middle": [], "end": []}
        for row, output in zip(rows, outputs):
            subset = {0: "begin", 1: "middle", 3: "end"}[row["gold_position"]]
            by_subset[subset].append(hash_score(row["id"], output.text))
        expected = {name: sum(v) / len(v) for name, v in by_subset.items()}
        assert result.per_subset == expected
        assert result.overall == pytest.approx(
            0.1 * expected["begin"] + 0.6 * expected["middle"] + 0.3 * expected["end"]
        )
    assert results[0].per_subset != results[1].per_subset  # the scales change the answers


def test_task_metric_is_the_default_scorer(tiny):
    model, tokenizer = tiny
    fitness = HarnessFitness(model, tokenizer, "kv", {"num_keys": 4}, num_examples=2, settings=SETTINGS)
    (result,) = fitness.evaluate([SCALES])
    assert result.per_subset == {"begin": 0.0, "middle": 0.0, "end": 0.0}  # random weights never find the UUID


def test_gold_loglik_scores_the_gold_answer_teacher_forced(tiny):
    """Reference: one unpadded forward per prompt + gold answer under the same scales, log-softmax by hand."""
    model, tokenizer = tiny
    fitness = HarnessFitness(
        model, tokenizer, "kv", {"num_keys": 4}, num_examples=3, settings=SETTINGS, score="gold_loglik"
    )
    metric = HarnessFitness(model, tokenizer, "kv", {"num_keys": 4}, num_examples=3, settings=SETTINGS)
    assert fitness.context != metric.context and fitness.describe()["score"] == "gold_loglik"
    assert fitness.question_score_max == 0.0 and metric.question_score_max == 1.0
    scores = fitness.row_scores([SCALES])[0]
    expected = []
    with scaled_model(model, SCALES), torch.no_grad():
        for row, prompt in zip(fitness.prepared.rows, fitness.prepared.prompts):
            gold = tokenizer(" " + row["answers"][0], add_special_tokens=False)["input_ids"]
            ids = list(prompt.input_ids) + gold
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
            expected.append(
                sum(float(logprobs[len(ids) - len(gold) - 1 + j, t]) for j, t in enumerate(gold)) / len(gold)
            )
    assert_close_to_scale(scores, expected, 1e-5, what="gold loglik per token")
    whole = fitness.evaluate([SCALES])[0]
    by_question = fitness.combine_questions(fitness.evaluate_questions([SCALES], 0, fitness.num_questions)[0])
    assert_close_to_scale([whole.overall], [by_question.overall], 1e-6, what="fitness by questions")
    with pytest.raises(ValueError, match=r"task.score must be one of \['metric', 'gold_loglik'\]"):
        HarnessFitness(model, tokenizer, "kv", {"num_keys": 4}, num_examples=1, score="loglik")


def test_gold_continuation_follows_the_prompt_form():
    mdqa = build_task("mdqa", path=str(NQ), num_documents=3)
    assert mdqa.gold_continuation(["Paris", "paris"], False) == " Paris"
    assert mdqa.gold_continuation(["Paris"], True) == "Paris"  # the assistant turn starts on its own
    pairs = build_task("kv", num_keys=4, num_examples=1, key_chars=1, template="pairs")
    assert pairs.gold_continuation(["A"], False) == "A"  # "… kc" -> "A": no separator after the key
    with pytest.raises(ValueError, match="has no gold answer"):
        mdqa.gold_continuation([], False)


def test_mdqa_search_set_from_the_fixture(tiny):
    model, tokenizer = tiny
    params = {"path": str(NQ), "num_documents": 3}  # ~2,000 bytes: what fits the byte model's 2,048 positions
    fitness = HarnessFitness(model, tokenizer, "mdqa", params, num_examples=2, settings=SETTINGS)
    assert fitness.positions == {"begin": 0, "middle": 1, "end": 2}
    assert {row["gold_position"] for row in fitness.prepared.rows} == {0, 1, 2}
    assert fitness.example_ids == ["mdqa-k3-s0-q00000", "mdqa-k3-s0-q00001"]
    held_out = HarnessFitness(model, tokenizer, "mdqa", params, num_examples=2, example_offset=2, settings=SETTINGS)
    assert held_out.example_ids == ["mdqa-k3-s0-q00002", "mdqa-k3-s0-q00003"]


def test_held_out_uses_other_examples_and_scores_three_methods(tiny):
    model, tokenizer = tiny
    search = HashScored(model, tokenizer, "kv", {"num_keys": 4}, num_examples=2, settings=SETTINGS)
    held = evaluate_held_out(
        model,
        tokenizer,
        "kv",
        {"num_keys": 4},
        [1.0, 1.0, 1.0, 1.0],
        num_examples=2,
        example_offset=2,
        settings=SETTINGS,
        exclude_example_ids=search.example_ids,
        fitness_cls=HashScored,
    )
    assert held["pi_mean"]["scale"] == 1.0
    assert held["lpes"] == held["baseline"] == {k: v for k, v in held["pi_mean"].items() if k != "scale"}
    assert held["data_sha256"] != search.data_sha256
    with pytest.raises(ValueError, match="held-out examples overlap the search set"):
        evaluate_held_out(
            model, tokenizer, "kv", {"num_keys": 4}, SCALES, num_examples=2, exclude_example_ids=search.example_ids
        )


@pytest.mark.parametrize(
    ("task", "params", "message"),
    [
        ("mdqa_release", {}, r"task 'mdqa_release' has no num_items or gold_positions parameter: the search needs"),
        ("qa", {}, r"task.name 'qa' is not a registered task; choose from \['babi_qa2', "),
        ("kv", {"num_keys": 4, "gold_positions": "all"}, r"must not set \['gold_positions'\]"),
        ("kv", {}, r"needs task_params\['num_keys'\]"),
        ("kv", {"num_keys": 2}, "k >= 3"),
    ],
)
def test_clear_errors(tiny, task, params, message):
    with pytest.raises(ValueError, match=message):
        HarnessFitness(*tiny, task, params, num_examples=1)


def test_wrong_number_of_scales(tiny):
    fitness = HarnessFitness(*tiny, "kv", {"num_keys": 3}, num_examples=1, settings=SETTINGS)
    with pytest.raises(ValueError, match="got 3 scales for a model with 4 layers"):
        fitness.evaluate([[1.0, 1.0, 1.0]])


def test_a_model_lpes_cannot_scale_fails_before_the_search(tiny):
    from repo_train.modeling import RePoOlmo2ForCausalLM
    from repo_train.modeling.presets import tiny as tiny_config

    repo = RePoOlmo2ForCausalLM(tiny_config(position_method="repo", vocab_size=258)).eval()
    with pytest.raises(ValueError, match="layer 1 uses the 'repo' policy"):
        HarnessFitness(repo, tiny[1], "kv", {"num_keys": 3}, num_examples=1, settings=SETTINGS)


@pytest.mark.slow  # each question generated alone (~4 s)
def test_questions_score_alone_as_in_the_whole_set_and_combine_to_evaluate(tiny):
    """Racing's per-question path: a question's score is the same whichever range it is scored in, and the
    combined questions are `evaluate`'s result bit for bit (tiny random model, hash-scored: varied 0/1 values)."""
    model, tokenizer = tiny
    fitness = HashScored(model, tokenizer, "kv", {"num_keys": 5}, num_examples=6, settings=SETTINGS)
    assert fitness.num_questions == 6
    candidates = [SCALES, [1.0] * 4, [2.0, 1.5, 1.0, 1.2]]
    whole = fitness.evaluate_questions(candidates, 0, 6)
    staged = [
        a + b
        for a, b in zip(fitness.evaluate_questions(candidates, 0, 2), fitness.evaluate_questions(candidates, 2, 6))
    ]
    assert whole == staged
    assert [fitness.combine_questions(q) for q in whole] == fitness.evaluate(candidates)
    values = {r.per_subset[name] for q in whole for r in q for name in ("begin", "middle", "end")}
    assert values == {0.0, 1.0}  # the check above compared varied scores, not zeros
    weights = fitness.weights
    assert whole[0][3].overall == weights.combine(whole[0][3].per_subset)
    with pytest.raises(ValueError, match=r"questions \[4, 7\) are not inside \[0, 6\)"):
        fitness.evaluate_questions(candidates, 4, 7)
