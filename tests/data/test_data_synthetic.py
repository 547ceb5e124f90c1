"""Synthetic corpus: exact structure of each task, determinism per sample, learnability, bad input."""

import numpy as np
import pytest
import torch

from repo_train.data import SyntheticDataset
from repo_train.data.synthetic import (
    BOS_ID,
    COPY_ID,
    EOS_ID,
    KV_ID,
    QUERY_ID,
    REPEAT_ID,
    REVERSE_ID,
    SEP_ID,
)


def test_samples_are_long_tensors_of_seq_len_starting_with_bos():
    dataset = SyntheticDataset(num_samples=30, seq_len=50, vocab_size=64, seed=0)
    assert len(dataset) == 30
    for i in range(30):
        ids = dataset[i]["input_ids"]
        assert ids.dtype == torch.long and ids.shape == (50,)
        assert ids[0] == BOS_ID
        assert 0 <= ids.min() and ids.max() < 64
    assert torch.equal(dataset[-1]["input_ids"], dataset[29]["input_ids"])
    with pytest.raises(IndexError, match="out of range"):
        dataset[30]


def test_each_sample_depends_only_on_seed_and_index():
    a = SyntheticDataset(num_samples=100, seq_len=40, seed=7)
    b = SyntheticDataset(num_samples=5, seq_len=40, seed=7)  # another size, same samples
    forward = [a[i]["input_ids"] for i in range(5)]
    backward = [b[i]["input_ids"] for i in reversed(range(5))][::-1]
    for x, y in zip(forward, backward, strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a[0]["input_ids"], a[1]["input_ids"])
    other_seed = SyntheticDataset(num_samples=5, seq_len=40, seed=8)
    assert not torch.equal(a[0]["input_ids"], other_seed[0]["input_ids"])
    np.testing.assert_array_equal(a.order(2), a.order(2))
    assert not np.array_equal(a.order(0), a.order(1))


def test_sequence_is_bos_then_packed_episodes_cut_at_seq_len():
    dataset = SyntheticDataset(num_samples=10, seq_len=97, seed=3)
    for i in range(10):
        episodes = dataset.episodes(i)
        packed = np.concatenate([[BOS_ID]] + [tokens for _, tokens in episodes])
        assert len(packed) >= 97 and len(packed) - len(episodes[-1][1]) < 97  # stops once full
        np.testing.assert_array_equal(dataset[i]["input_ids"].numpy(), packed[:97])


def test_every_task_has_its_exact_structure():
    dataset = SyntheticDataset(num_samples=40, seq_len=256, seed=1)
    seen = set()
    for i in range(40):
        for task, tokens in dataset.episodes(i):
            seen.add(task)
            body = tokens.tolist()
            assert body[-1] == EOS_ID
            if task in ("copy", "reverse"):
                assert body[0] == (COPY_ID if task == "copy" else REVERSE_ID)
                n = (len(body) - 3) // 2
                span, sep, answer = body[1 : 1 + n], body[1 + n], body[2 + n : -1]
                assert sep == SEP_ID and 2 <= n <= 12
                assert answer == (span if task == "copy" else span[::-1])
            elif task == "kv":
                assert body[0] == KV_ID and body[-4] == QUERY_ID
                listing = body[1:-4]
                keys, values = listing[0::2], listing[1::2]
                assert 2 <= len(keys) <= 8 and len(set(keys)) == len(keys)
                assert body[-2] == values[keys.index(body[-3])]
            else:
                assert body[0] == REPEAT_ID
                content = body[1:-1]
                period = next(
                    p for p in range(2, 7) if len(content) % p == 0 and content == content[:p] * (len(content) // p)
                )
                assert len(content) // period >= 3
    assert seen == {"copy", "reverse", "kv", "ngram"}


def test_task_weights_select_tasks():
    only_kv = SyntheticDataset(num_samples=5, seq_len=128, seed=0, copy_weight=0, reverse_weight=0, ngram_weight=0)
    assert {task for i in range(5) for task, _ in only_kv.episodes(i)} == {"kv"}
    # query position varies across episodes: the answer's source pair is not always in the same slot
    slots = {ep.tolist()[1:-4][0::2].index(ep.tolist()[-3]) for i in range(5) for _, ep in only_kv.episodes(i)}
    assert len(slots) >= 4


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="seq_len must be an integer >= 2"):
        SyntheticDataset(seq_len=1)
    with pytest.raises(ValueError, match="vocab_size must be >= 32"):
        SyntheticDataset(vocab_size=20)
    with pytest.raises(ValueError, match="not all 0"):
        SyntheticDataset(copy_weight=0, reverse_weight=0, kv_weight=0, ngram_weight=0)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        SyntheticDataset(num_samples=0)


@pytest.mark.slow  # 100 training steps (~4 s)
def test_a_tiny_transformer_learns_it_within_100_steps():
    torch.manual_seed(0)
    dataset = SyntheticDataset(num_samples=1600, seq_len=48, seed=0)
    width, vocab = 64, dataset.vocab_size
    embed, position = torch.nn.Embedding(vocab, width), torch.nn.Embedding(47, width)
    layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, 0.0, batch_first=True, norm_first=True)
    body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    head = torch.nn.Linear(width, vocab)
    params = [p for m in (embed, position, body, head) for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(47)
    losses = []
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, sampler=dataset.sampler())
    for batch in loader:
        ids = batch["input_ids"]
        hidden = body(embed(ids[:, :-1]) + position.weight, mask=mask, is_causal=True)
        loss = torch.nn.functional.cross_entropy(head(hidden).reshape(-1, vocab), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == 100
    first, last = np.mean(losses[:5]), np.mean(losses[-10:])
    assert first > 5.0  # about ln(256) at initialisation
    assert last < first - 0.8
