"""TokenIds: packed token ids that behave like the tuple they replace, at a ninth of the memory."""

import array
import hashlib
import json
import pickle
import tracemalloc
from types import SimpleNamespace

import pytest
import torch

from evaluation.methods.decoding import TokenizedPrompt, collate
from evaluation.runner import prompts_digest
from evaluation.token_ids import TokenIds

IDS = [49151, 0, 257, 1, 30000, 30000, 12]


def test_behaves_like_the_tuple_of_its_ids():
    ids = TokenIds(IDS)
    assert ids == tuple(IDS) and tuple(IDS) == ids and ids == IDS and IDS == ids
    assert ids != tuple(IDS[:-1]) and ids != (*IDS[:-1], 13)
    assert hash(ids) == hash(tuple(IDS)) and {tuple(IDS): 1}[ids] == 1
    assert len(ids) == 7 and ids[0] == 49151 and ids[-1] == 12 and list(ids) == IDS and max(ids) == 49151
    assert isinstance(ids[2:5], TokenIds) and ids[2:5] == (257, 1, 30000) and ids[::-1] == IDS[::-1]
    assert ids + (5, 6) == (*IDS, 5, 6) and (5,) + ids == (5, *IDS) and isinstance(ids + [1], TokenIds)
    assert ids.count(30000) == 2 and 257 in ids and ids.index(257) == 2
    assert pickle.loads(pickle.dumps(ids)) == ids and TokenIds(ids) == ids
    assert repr(TokenIds([1, 2])) == "TokenIds([1, 2])"


def test_is_immutable_and_refuses_ids_past_32_bits():
    ids = TokenIds(IDS)
    with pytest.raises(AttributeError, match="immutable"):
        ids._ids = array.array("i")
    with pytest.raises(TypeError):
        ids[0] = 3
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        TokenIds([1, 2**31])


def test_as_tensor_equals_torch_tensor_of_the_ids():
    for ids in (IDS, [], [7]):
        got = TokenIds(ids).as_tensor()
        assert got.dtype == torch.long and torch.equal(got, torch.tensor(ids, dtype=torch.long))


def test_a_prompt_keeps_its_ids_packed_and_collates_as_before():
    prompt = TokenizedPrompt(tuple(IDS), ((1, 3),))
    assert isinstance(prompt.input_ids, TokenIds) and prompt.input_ids == tuple(IDS)
    assert TokenizedPrompt(IDS) == TokenizedPrompt(tuple(IDS)) and hash(TokenizedPrompt(IDS)) == hash(
        TokenizedPrompt(tuple(IDS))
    )
    batch = collate([prompt, TokenizedPrompt([4, 5])], pad_token_id=-1)
    assert batch.input_ids.tolist() == [IDS, [-1] * 5 + [4, 5]]
    assert batch.item_token_spans == [[(1, 3)], []] and batch.pad_lengths == [0, 5]


def test_the_prompts_digest_is_the_one_of_tuple_ids():
    """run.json pins prompts by this digest: packing must not change it, or every earlier run would be refused."""
    rows = [{"id": "q1", "example_id": 0, "gold_position": 2, "answers": ["a"]}]
    expected = hashlib.sha256()
    expected.update(json.dumps(["q1", 0, 2, ["a"], False], default=str).encode())
    expected.update(array.array("q", tuple(IDS)).tobytes())
    prepared = SimpleNamespace(rows=rows, prompts=[TokenizedPrompt(IDS)])
    assert prompts_digest(prepared) == expected.hexdigest()[:32]


def test_a_token_costs_a_ninth_of_a_tuple_entry():
    def bytes_per_token(make):
        tracemalloc.start()
        try:
            kept = [make(range(300 + i, 3300 + i)) for i in range(50)]
            return tracemalloc.get_traced_memory()[0] / (50 * 3000), kept
        finally:
            tracemalloc.stop()

    packed, _ = bytes_per_token(TokenIds)
    boxed, _ = bytes_per_token(tuple)
    assert packed < 4.5 and boxed > 30, (packed, boxed)
