"""RULER-style tasks: prompt text, tokenizer-measured length, needle depths, pairing, scoring, errors."""

from __future__ import annotations

import itertools

import pytest

from evaluation.model_loading import byte_tokenizer
from evaluation.tasks import build_task
from evaluation.tasks.ruler import (
    ESSAY_SENTENCES,
    NOISE_BLOCK,
    Insert,
    depth_grid,
    largest_fitting,
    lay_out,
    niah_prompt_parts,
    string_match_all,
    vt_prompt_parts,
)

BYTE = byte_tokenizer()
NOISE = (
    "The river runs on toward the sea. The hills stay quiet in the evening. The old clock keeps ticking. "
    "One step follows another. Round and round it goes."
)


def niah(name="ruler_niah_single", **kw):
    params = dict(num_examples=2, target_length=700, tokenizer=BYTE, depths=3)
    return build_task(name, **{**params, **kw}).build()


def test_prompt_parts_byte_for_byte():
    header, footer = niah_prompt_parts("numbers", "calm-drum", plural=False)
    assert header == "A special magic number is hidden in the text below. Memorize it; I will ask about it later.\n"
    assert footer == (
        "\nWhich special magic number for calm-drum does the text above mention? "
        "The special magic number for calm-drum mentioned in the text above is"
    )
    header, footer = niah_prompt_parts("uuids", "a and b", plural=True)
    assert (
        header == "Some special magic uuids are hidden in the text below. Memorize them; I will ask about them later.\n"
    )
    assert footer == (
        "\nWhich special magic uuids for a and b does the text above mention? "
        "The special magic uuids for a and b mentioned in the text above are"
    )
    header, footer = vt_prompt_parts("12345", 5)
    assert header == "Follow every chain of variable assignments hidden in the text below.\n\n"
    assert footer == (
        "\nQuestion: Which variables are assigned the value 12345 in the text above? Answer: Following the chains "
        "in the text above, 5 variables hold the value 12345. They are: "
    )
    assert NOISE_BLOCK == NOISE


def test_single_needle_prompt_is_header_needle_noise_footer():
    row = niah(haystack="noise", num_examples=1, depths=[0])[0]
    (value,) = row["answers"]
    key = row["query"]
    needle = f"One of the special magic numbers for {key} is: {value}."
    header = "A special magic number is hidden in the text below. Memorize it; I will ask about it later.\n"
    footer = (
        f"\nWhich special magic number for {key} does the text above mention? "
        f"The special magic number for {key} mentioned in the text above is"
    )
    body = row["prompt"][len(header) : -len(footer)]
    n = body.count(NOISE)
    assert n >= 1 and row["prompt"] == header + "\n".join([needle] + [NOISE] * n) + footer
    assert row["depth_percent"] == 0.0 and row["gold_position"] == 0 and row["num_positions"] == 1


@pytest.mark.parametrize("haystack", ["essay", "noise"])
def test_target_length_is_reached_within_one_filler_unit(haystack):
    target = 900
    longest = max(len(s) for s in (*ESSAY_SENTENCES, NOISE)) + 1  # one unit and its separator, in bytes
    for row in niah(haystack=haystack, target_length=target):
        assert row["prompt_tokens"] == len(row["prompt"].encode()) == len(BYTE(row["prompt"])["input_ids"])
        assert target - longest < row["prompt_tokens"] <= target


def test_needle_depths_and_buckets():
    rows = niah(num_examples=1, depths=5, target_length=2000)
    assert [r["depth_percent"] for r in rows] == [0.0, 25.0, 50.0, 75.0, 100.0]
    header_len = len("A special magic number is hidden in the text below. Memorize it; I will ask about it later.\n")
    for row in rows:
        prompt, value = row["prompt"], row["answers"][0]
        needle = f"One of the special magic numbers for {row['query']} is: {value}."
        start = prompt.index(needle)
        spans = row["item_spans"]
        context_end = prompt.index("\nWhich special magic")
        assert spans[0][0] == header_len and spans[-1][1] == context_end  # buckets tile the haystack
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))  # separated by one space
        s, e = spans[row["gold_position"]]
        assert s <= start and start + len(needle) <= e  # the needle lies in its depth's bucket
        fraction = (start - header_len) / (context_end - header_len)
        assert abs(fraction - row["depth_percent"] / 100) < 0.08
    assert rows[0]["prompt"][header_len:].startswith("One of the special magic numbers")
    assert rows[-1]["prompt"][: rows[-1]["prompt"].index("\nWhich")].endswith(rows[-1]["answers"][0] + ".")


def test_depths_share_haystack_and_other_needles():
    rows = niah("ruler_niah_multikey", num_examples=1, depths=4, target_length=1500)
    assert all(len(r["answers"]) == 1 for r in rows)
    bodies = []
    for row in rows:
        anchor = f"One of the special magic numbers for {row['query']} is: {row['answers'][0]}."
        units = row["prompt"][: row["prompt"].index("\nWhich")].split("\n", 1)[1]
        assert units.count("One of the special magic numbers for") == 4
        bodies.append(units.replace(anchor + " ", "").replace(" " + anchor, ""))
    assert len(set(bodies)) == 1  # only the anchor moved


def test_variants_answers():
    mv = niah("ruler_niah_multivalue", num_examples=1, depths=[50], target_length=1200)[0]
    assert len(mv["answers"]) == 4 and mv["prompt"].count(f"for {mv['query']} is:") == 4
    assert mv["prompt"].startswith("Some special magic numbers are hidden")
    mq = niah("ruler_niah_multiquery", num_examples=1, depths=[50], target_length=1200)[0]
    keys = mq["query"].replace(", and ", ", ").split(", ")
    assert len(keys) == 4 and len(mq["answers"]) == 4
    for key, value in zip(keys, mq["answers"]):
        assert f"One of the special magic numbers for {key} is: {value}." in mq["prompt"]
    uuids = niah(num_examples=1, depths=[50], key_type="uuids", value_type="uuids")[0]
    assert len(uuids["answers"][0]) == 36 and "special magic uuid for" in uuids["prompt"]


def test_variable_tracking_chain_order_and_answers():
    rows = build_task("ruler_vt", num_examples=1, target_length=1200, tokenizer=BYTE, depths=[0, 50, 100]).build()
    for row in rows:
        names = row["answers"]
        assert len(names) == 5 and row["query"].isdigit()
        first = row["prompt"].index(f"VAR {names[0]} = {row['query']}.")
        places = [first] + [row["prompt"].index(f"VAR {b} = VAR {a}.") for a, b in itertools.pairwise(names)]
        assert places == sorted(places)
    assert rows[0]["prompt"].startswith(
        f"Follow every chain of variable assignments hidden in the text below.\n\nVAR {rows[0]['answers'][0]} ="
    )


def test_deterministic_by_seed():
    a, b = niah(seed=3), niah(seed=3)
    assert a.to_list() == b.to_list()
    assert a["prompt"] != niah(seed=4)["prompt"]


def test_string_match_all_and_score_modes():
    assert string_match_all("It is 1234567 and 7654321.", ["1234567", "7654321", "1111111"]) == pytest.approx(2 / 3)
    assert string_match_all("ABC-def", ["abc-DEF"]) == 1.0
    task = build_task("ruler_niah_multivalue", num_examples=1, tokenizer=BYTE, score_mode="all")
    assert task.score("1 2", ["1", "2"]) == 1.0 and task.score("1", ["1", "2"]) == 0.0
    assert build_task("ruler_vt", num_examples=1, tokenizer=BYTE).generation_defaults() == (30, ())


def test_layout_and_fitting_helpers():
    layout = lay_out(["a", "b", "c", "d"], [Insert("X", 50.0, 0), Insert("Y", 100.0, 1)], " ", [50.0])
    assert layout.text == "a b X c d Y"
    assert layout.insert_spans == {0: (4, 5), 1: (10, 11)}
    assert layout.bucket_spans == [[0, 3], [4, 11]]
    assert depth_grid(3) == [0.0, 50.0, 100.0] and depth_grid(1) == [50.0] and depth_grid([75, 10]) == [10.0, 75.0]
    assert depth_grid("0,50,100") == [0.0, 50.0, 100.0]  # as a CLI --task_param gives it
    for guess in (1, 7, 30, 500):
        assert largest_fitting(lambda n: 5 + 3 * n, 50, guess) == 15
    assert largest_fitting(lambda n: 60 + n, 50, 4) == -1


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="pass num_examples"):
        build_task("ruler_niah_single", tokenizer="byte")
    with pytest.raises(ValueError, match="pass tokenizer="):
        build_task("ruler_niah_single", num_examples=1).build()
    with pytest.raises(ValueError, match="leaves no room for filler"):
        niah(target_length=120)
    with pytest.raises(ValueError, match="unknown haystack 'pg19'"):
        build_task("ruler_niah_single", num_examples=1, haystack="pg19")
    with pytest.raises(ValueError, match=r"num_queries=5 > num_keys=4"):
        build_task("ruler_niah_multiquery", num_examples=1, num_queries=5)
    with pytest.raises(ValueError, match=r"percentages in \[0, 100\]"):
        build_task("ruler_niah_single", num_examples=1, depths=[120])
    with pytest.raises(ValueError, match="not a comma-separated list of percentages"):
        build_task("ruler_niah_single", num_examples=1, depths="0;50")
    with pytest.raises(FileNotFoundError, match="tokenizer directory"):
        niah(tokenizer="/nowhere/tok")
