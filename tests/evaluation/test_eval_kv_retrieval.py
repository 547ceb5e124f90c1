"""Key-value retrieval: prompt format, gold moves, spans, release files, generator, errors."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest

from evaluation.tasks import build_task
from evaluation.tasks.kv_retrieval import KVRetrievalTask, build_kv_prompt, move_pair

PAIRS = [("k-one", "v-one"), ("k-two", "v-two"), ("k-three", "v-three")]
EXPECTED_3_PAIRS = (
    "Extract the value corresponding to the specified key in the JSON object below.\n"
    "\n"
    "JSON data:\n"
    '{"k-one": "v-one",\n'
    ' "k-two": "v-two",\n'
    ' "k-three": "v-three"}\n'
    "\n"
    'Key: "k-two"\n'
    "Corresponding value:"
)


def read_fixture(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_prompt_format_byte_for_byte() -> None:
    prompt, spans = build_kv_prompt(PAIRS, "k-two")
    assert prompt == EXPECTED_3_PAIRS
    assert [prompt[s:e] for s, e in spans] == ['{"k-one": "v-one",', ' "k-two": "v-two",', ' "k-three": "v-three"}']
    single, _ = build_kv_prompt([("a", "b")], "a")
    assert '\n{"a": "b"}\n\n' in single


def test_move_pair_keeps_other_order() -> None:
    pairs = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
    assert move_pair(pairs, 2, 0) == [("c", "3"), ("a", "1"), ("b", "2"), ("d", "4")]
    assert move_pair(pairs, 0, 3) == [("b", "2"), ("c", "3"), ("d", "4"), ("a", "1")]
    assert move_pair(pairs, 1, 1) == pairs


def test_release_file_gold_at_every_index(kv_path: str) -> None:
    records = read_fixture(kv_path)
    ds = KVRetrievalTask(path=kv_path, gold_positions="all", num_examples=2).build()
    assert len(ds) == 2 * 75
    for example in range(2):
        record = records[example]
        original = [tuple(p) for p in record["ordered_kv_records"]]
        others = [p for p in original if p[0] != record["key"]]
        rows = [r for r in ds if r["source_index"] == example]
        assert [r["gold_position"] for r in rows] == list(range(75))
        for row in rows:
            assert row["answers"] == [record["value"]] and row["key"] == record["key"]
            assert row["num_positions"] == 75 and row["task"] == "kv"
            lines = [row["prompt"][s:e] for s, e in row["item_spans"]]
            assert f'"{record["key"]}": "{record["value"]}"' in lines[row["gold_position"]]
            parsed = [next(iter(json.loads("{" + line.strip(" {},") + "}").items())) for line in lines]
            assert [p for i, p in enumerate(parsed) if i != row["gold_position"]] == others
        # at the pair's original index the prompt is the release's unmodified example
        at_source = rows[original.index((record["key"], record["value"]))]
        assert at_source["prompt"] == build_kv_prompt(original, record["key"])[0]


def test_item_spans_slice_kv_lines(kv_path: str) -> None:
    for row in KVRetrievalTask(path=kv_path, gold_positions="quartiles").build():
        prompt, spans = row["prompt"], row["item_spans"]
        block = prompt.split("JSON data:\n", 1)[1].split("\n\nKey: ", 1)[0]
        assert block == "\n".join(prompt[s:e] for s, e in spans)
        assert block.count("\n") == len(spans) - 1 == 74
        assert prompt[spans[0][0]] == "{" and prompt[spans[-1][1] - 1] == "}"
        assert all(prompt[s] == " " and prompt[e - 1] == "," for s, e in spans[1:-1])


def test_generator_any_key_count() -> None:
    task = KVRetrievalTask(num_keys=140, num_examples=3, gold_positions="quartiles", seed=7)
    ds = task.build()
    assert [r["gold_position"] for r in ds] == [0, 35, 70, 104, 139] * 3  # 34.75, 69.5, 104.25
    assert ds[0]["id"] == "kv-gen-n140-s7-ex00000-pos000"
    for row in ds:
        lines = [row["prompt"][s:e] for s, e in row["item_spans"]]
        keys = [line.strip(" {},").split('": "')[0].strip('"') for line in lines]
        assert len(set(keys)) == 140 and keys[row["gold_position"]] == row["key"]
        assert uuid.UUID(row["key"]).version == 4 and uuid.UUID(row["value"]).version == 4
        assert row["prompt"].endswith(f'\n\nKey: "{row["key"]}"\nCorresponding value:')
        assert task.score(f"The value is {row['value']}.", row["answers"]) == 1.0


def test_generator_determinism() -> None:
    def build(seed: int):
        return KVRetrievalTask(num_keys=9, num_examples=4, gold_positions="all", seed=seed).build()

    first, again, other = build(0), build(0), build(1)
    assert first.to_list() == again.to_list()
    assert first["key"] != other["key"]
    # other pairs identical across positions of one example
    rows = [r for r in first if r["source_index"] == 0]
    contexts = {
        tuple(r["prompt"][s:e].strip(" {},") for i, (s, e) in enumerate(r["item_spans"]) if i != r["gold_position"])
        for r in rows
    }
    assert len(contexts) == 1


def test_bad_inputs(kv_path: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"needs path= .* or num_keys= to generate"):
        KVRetrievalTask()
    with pytest.raises(ValueError, match=r"generated KV retrieval needs num_examples="):
        KVRetrievalTask(num_keys=10)
    with pytest.raises(ValueError, match=r"num_keys must be an int >= 1, got 0"):
        KVRetrievalTask(num_keys=0, num_examples=1)
    with pytest.raises(ValueError, match=r"gold position\(s\) \[10\] outside \[0, 9\]"):
        KVRetrievalTask(num_keys=10, num_examples=1, gold_positions=[10])
    with pytest.raises(ValueError, match=r"gold position\(s\) \[75\] outside \[0, 74\]"):
        KVRetrievalTask(path=kv_path, gold_positions=[75]).build()
    with pytest.raises(ValueError, match=r"has 75 pairs but num_keys=140"):
        KVRetrievalTask(path=kv_path, num_keys=140).build()
    with pytest.raises(FileNotFoundError, match=r"KV retrieval file .* not found"):
        KVRetrievalTask(path=str(tmp_path / "kv-retrieval-300_keys.jsonl.gz"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"ordered_kv_records": [["a", "1"]], "key": "b", "value": "2"}) + "\n")
    with pytest.raises(ValueError, match=r"the key must occur exactly once"):
        KVRetrievalTask(path=str(bad)).build()


def test_short_generated_keys() -> None:
    from evaluation.tasks import build_task

    task = build_task("kv", num_keys=6, num_examples=3, key_chars=4, gold_positions="all", seed=3)
    rows = list(task.rows())
    assert len(rows) == 18
    for row in rows:
        assert len(row["key"]) == 4 and len(row["value"]) == 4
        assert all(c in "0123456789abcdef" for c in row["key"] + row["value"])
        assert f'Key: "{row["key"]}"' in row["prompt"]
    with pytest.raises(ValueError, match="key_chars must be an int in"):
        build_task("kv", num_keys=6, num_examples=1, key_chars=0)
    with pytest.raises(ValueError, match="need more than key_chars=1"):
        build_task("kv", num_keys=9, num_examples=1, key_chars=1)


def test_pairs_template_prompt_spans_and_alphabets():
    from evaluation.runner import task_generation

    params = dict(num_keys=6, num_examples=3, key_chars=2, template="pairs", gold_positions="all", seed=4)
    rows = list(build_task("kv", **params).rows())
    assert len(rows) == 3 * 6
    for row in rows:
        items = [row["prompt"][start:end] for start, end in row["item_spans"]]
        assert row["prompt"] == " ".join(items) + " " + row["key"]
        keys, values = [item[:2] for item in items], [item[2:] for item in items]
        assert len(set(keys)) == 6 and all(set(k) <= set("abcdefghijklmnop") for k in keys)
        assert all(set(v) <= set("0123456789ABCDEF") for v in values)
        assert items[row["gold_position"]] == row["key"] + row["value"] and row["answers"] == [row["value"]]
    # every gold position of one example shows the same pairs, only the gold one moved
    first = [r for r in rows if r["example_id"] == rows[0]["example_id"]]
    assert sorted(r["prompt"] for r in first) == sorted({r["prompt"] for r in first})
    assert task_generation("kv", params) == (2, (" ",))
    assert task_generation("kv", dict(num_keys=6, num_examples=1)) == (100, ("\n",))


def test_pairs_template_errors():
    with pytest.raises(ValueError, match="pass key_chars="):
        build_task("kv", num_keys=4, num_examples=1, template="pairs")
    with pytest.raises(ValueError, match="unknown kv template 'yaml'"):
        build_task("kv", num_keys=4, num_examples=1, key_chars=1, template="yaml")


def test_distinct_keys_make_long_contexts_with_the_gold_key_once():
    params = dict(num_keys=40, distinct_keys=8, num_examples=3, key_chars=1, template="pairs", seed=2)
    rows = list(build_task("kv", **params, gold_positions=[0, 19, 39]).rows())
    assert len(rows) == 3 * 3 and {r["num_positions"] for r in rows} == {40}
    for row in rows:
        items = [row["prompt"][start:end] for start, end in row["item_spans"]]
        assert len(items) == 40 and row["prompt"] == " ".join(items) + " " + row["key"]
        keys = [item[0] for item in items]
        assert keys.count(row["key"]) == 1 and keys.index(row["key"]) == row["gold_position"]
        assert len(set(keys)) == 8
        value_of = {}
        for item in items:  # every key always carries its one value
            assert value_of.setdefault(item[0], item[1:]) == item[1:]
        assert value_of[row["key"]] == row["value"]
        # shuffled rounds: each of the 7 distractors appears 5 or 6 times in 39 filler pairs
        counts = [keys.count(k) for k in set(keys) - {row["key"]}]
        assert min(counts) >= 5 and max(counts) <= 6
    # the same example keeps its filler order across gold positions (only the gold pair moves)
    first = [r for r in rows if r["example_id"] == rows[0]["example_id"]]
    fillers = {r["prompt"].replace(r["key"] + r["value"] + " ", "", 1) for r in first}
    assert len(fillers) == 1
    assert "-d8-" in rows[0]["example_id"]
    # without distinct_keys, examples are unchanged by the new option (same ids and prompts as before)
    plain = dict(num_keys=8, num_examples=2, key_chars=1, template="pairs", seed=2, gold_positions=[0])
    assert [r["prompt"] for r in build_task("kv", **plain).rows()] == [
        r["prompt"] for r in build_task("kv", **plain, distinct_keys=None).rows()
    ]


def test_distinct_keys_errors():
    base = dict(num_examples=1, key_chars=1, template="pairs")
    with pytest.raises(ValueError, match="only the pairs template"):
        build_task("kv", num_keys=20, distinct_keys=4, num_examples=1, key_chars=1)
    with pytest.raises(ValueError, match="exceeds num_keys=4"):
        build_task("kv", num_keys=4, distinct_keys=6, **base)
    with pytest.raises(ValueError, match="int >= 2"):
        build_task("kv", num_keys=20, distinct_keys=1, **base)
    with pytest.raises(ValueError, match="9 distinct keys need more"):
        build_task("kv", num_keys=20, distinct_keys=9, **base)
    with pytest.raises(ValueError, match="set distinct_keys="):
        build_task("kv", num_keys=20, **base)


def test_default_metric_is_the_release_kv_containment():
    """The release scores KV by value-in-response (case-insensitive); best_subspan_em stays selectable."""
    from evaluation.metrics import best_subspan_em, kv_containment

    task = build_task("kv", num_keys=3, num_examples=1)
    assert task.metric_name == "kv_containment"
    # a UUID-like value with a dash: EM deletes the dash, so "ab" passes EM but is not the value
    assert best_subspan_em("ab", ["a-b"]) == 1.0 and kv_containment("ab", ["a-b"]) == 0.0
    assert task.score("ab", ["a-b"]) == 0.0
    assert task.score('The value is "A-B".', ["a-b"]) == 1.0
    em = build_task("kv", num_keys=3, num_examples=1, metric="best_subspan_em")
    assert em.metric_name == "best_subspan_em" and em.score("ab", ["a-b"]) == 1.0
    # pairs template, one hex digit: the value "A" normalizes to "" under EM and would match any answer
    pairs = dict(num_keys=4, num_examples=1, key_chars=1, template="pairs")
    assert build_task("kv", **pairs).score("B", ["A"]) == 0.0
    assert build_task("kv", **pairs, metric="best_subspan_em").score("B", ["A"]) == 1.0
    with pytest.raises(ValueError, match=r"unknown kv metric 'bleu'; choose one of \[.*'kv_containment'"):
        build_task("kv", num_keys=3, num_examples=1, metric="bleu")
