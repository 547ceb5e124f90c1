"""bAbI QA2 in distractor text: prompt text, story logic, tokenizer-measured lengths, fact buckets, scoring."""

from __future__ import annotations

import random
import re

import pytest

from evaluation.model_loading import byte_tokenizer
from evaluation.tasks import build_task
from evaluation.tasks.babi import ACTORS, LOCATIONS, OBJECTS, build_babi_prompt, location_match, make_story
from evaluation.tasks.ruler import ESSAY_SENTENCES

BYTE = byte_tokenizer()


def babi(**kw):
    params = dict(num_examples=2, lengths=[0, 1000], tokenizer=BYTE, num_positions=4)
    return build_task("babi_qa2", **{**params, **kw}).build()


def where_is(facts, obj):
    """An independent reading of a QA2 story: the object is where its last taker last went (after taking it)."""
    holder, place = None, {}
    for fact in facts:
        person, verb, thing = re.match(
            r"(\w+) (went to|moved to|journeyed to|travelled to|picked up|grabbed|got|took) the (\w+)\.", fact
        ).groups()
        if "to" in verb.split():
            place[person] = thing
        elif thing == obj:
            holder = person
    return place.get(holder)


def test_prompt_byte_for_byte():
    assert build_babi_prompt("Mary got the milk. Mary went to the garden.", "milk") == (
        "Below is a text in which facts about people and objects are hidden. Use only those facts to answer the "
        "question after it. Whoever takes an object carries it along, so the object is wherever that person went "
        "last. Answer with one word: the location.\n\n<context>\nMary got the milk. Mary went to the garden.\n"
        "</context>\n\nQuestion: Where is the milk?\nAnswer:"
    )


def test_stories_answer_follows_the_two_supporting_facts():
    for seed in range(200):
        story = make_story(random.Random(seed), num_facts=7)
        assert len(story.facts) == 7 and story.first_support < story.second_support
        assert story.obj in story.facts[story.first_support] and story.answer in story.facts[story.second_support]
        assert where_is(story.facts, story.obj) == story.answer


def test_lengths_buckets_and_fact_order():
    rows = babi()
    bare = [r for r in rows if r["length"] == 0]
    long = [r for r in rows if r["length"] == 1000]
    assert len(bare) == 2 and len(long) == 2 * 4
    longest = max(len(s) for s in ESSAY_SENTENCES) + 1
    for row in rows:
        context = row["prompt"].split("<context>\n", 1)[1].split("\n</context>", 1)[0]
        if row["length"]:
            assert row["context_tokens"] == len(context.encode()) and 1000 - longest < row["context_tokens"] <= 1000
        else:
            assert context == " ".join(row["facts"])
        places = [context.index(f) for f in row["facts"]]
        assert places == sorted(places)  # the story keeps its order
        first = [f for f in row["facts"] if re.search(r"(picked up|grabbed|got|took) the " + row["question"][13:-1], f)]
        start = row["prompt"].index(first[0])
        s, e = row["item_spans"][row["gold_position"]]
        assert s <= start < e  # the first supporting fact is in the bucket named by gold_position
        assert row["answers"] == [where_is(row["facts"], row["question"][13:-1])]
    assert sorted(r["gold_position"] for r in long if r["source_index"] == 0) == [0, 1, 2, 3]
    # paired: the same story at every bucket of a length
    assert len({tuple(r["facts"]) for r in long if r["source_index"] == 0}) == 1


def test_distractor_text_never_names_story_entities():
    words = set(re.findall(r"[a-z]+", " ".join(ESSAY_SENTENCES).lower()))
    assert not words & {w.lower() for w in (*ACTORS, *LOCATIONS, *OBJECTS)}


def test_location_match():
    assert location_match("kitchen", ["kitchen"]) == 1.0
    assert location_match("The apple is in the Kitchen.", ["kitchen"]) == 1.0
    assert location_match("kitchen or garden", ["kitchen"]) == 0.0
    assert location_match("kitchenette", ["kitchen"]) == 0.0
    assert location_match("", ["kitchen"]) == 0.0


def test_deterministic_and_seeded():
    assert babi(seed=1).to_list() == babi(seed=1).to_list()
    assert babi(seed=1)["prompt"] != babi(seed=2)["prompt"]
    only_bare = build_task("babi_qa2", num_examples=3, lengths=0).build()  # no tokenizer needed without distractors
    assert len(only_bare) == 3 and set(only_bare["length"]) == {0}
    assert babi(lengths="0,1000", num_examples=1).to_list() == babi(lengths=[1000, 0], num_examples=1).to_list()


def test_errors():
    with pytest.raises(ValueError, match="shorter than the story"):
        babi(lengths=[20])
    with pytest.raises(ValueError, match="pass tokenizer="):
        build_task("babi_qa2", num_examples=1, lengths=[500]).build()
    with pytest.raises(ValueError, match="pass num_examples"):
        build_task("babi_qa2")
    with pytest.raises(ValueError, match="lengths must be an int >= 0"):
        build_task("babi_qa2", num_examples=1, lengths=[-5])
    with pytest.raises(ValueError, match="num_facts must be an int >= 2"):
        build_task("babi_qa2", num_examples=1, num_facts=1)
