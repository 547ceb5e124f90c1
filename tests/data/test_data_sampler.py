"""Epoch order and ResumableSampler: determinism, equal shards per rank, exact resume."""

import numpy as np
import pytest
import torch

from repo_train.data import ResumableSampler, SyntheticDataset, epoch_order


def _take(sampler, count):
    out = []
    for index in sampler:
        out.append(index)
        if len(out) == count:
            break
    return out


def _stream(dataset_len, seed, world_size, epochs, start=0):
    """What every rank sees, rank by rank, over `epochs` full passes from `start`."""
    samplers = [ResumableSampler(dataset_len, seed, r, world_size, start) for r in range(world_size)]
    return [[i for _ in range(epochs) for i in s] for s in samplers]


def test_epoch_order_is_a_seeded_permutation():
    first = epoch_order(50, seed=3, epoch=0)
    assert first.dtype == np.int64
    assert sorted(first.tolist()) == list(range(50))
    np.testing.assert_array_equal(first, epoch_order(50, seed=3, epoch=0))
    assert not np.array_equal(first, epoch_order(50, seed=3, epoch=1))
    assert not np.array_equal(first, epoch_order(50, seed=4, epoch=0))
    np.testing.assert_array_equal(epoch_order(5, seed=3, epoch=7, shuffle=False), [0, 1, 2, 3, 4])


def test_one_rank_walks_epochs_in_order():
    sampler = ResumableSampler(7, seed=1)
    assert len(sampler) == 7
    assert list(sampler) == epoch_order(7, 1, 0).tolist()
    assert sampler.epoch == 1 and sampler.consumed == 7
    assert list(sampler) == epoch_order(7, 1, 1).tolist()
    assert sampler.state_dict() == {"consumed": 14, "dataset_len": 7, "seed": 1, "shuffle": True, "world_size": 1}


def test_ranks_get_equal_disjoint_strided_shares():
    order = epoch_order(10, 5, 0)
    shares = [list(ResumableSampler(10, 5, rank, 3)) for rank in range(3)]
    assert [len(s) for s in shares] == [3, 3, 3]  # the 10th sample is dropped
    assert shares[1] == order[[1, 4, 7]].tolist()
    assert sorted(i for share in shares for i in share) == sorted(order[:9].tolist())


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("stop_after", [0, 3, 5])
def test_resume_reproduces_the_uninterrupted_run(world_size, stop_after):
    dataset_len, seed = 22, 9
    full = _stream(dataset_len, seed, world_size, epochs=3)
    resumed = []
    for rank in range(world_size):
        first = ResumableSampler(dataset_len, seed, rank, world_size)
        seen = _take(first, stop_after) if stop_after else []
        state = first.state_dict()
        assert state["consumed"] == stop_after * world_size
        second = ResumableSampler(dataset_len, seed, rank, world_size)
        second.load_state_dict(state)
        rest = list(second)  # the rest of the interrupted epoch, then two more
        rest += list(second) + list(second)
        resumed.append(seen + rest)
    per_epoch = dataset_len // world_size
    for rank in range(world_size):
        assert resumed[rank][: 3 * per_epoch] == full[rank]


def test_resume_on_another_world_size_continues_the_same_global_stream():
    order = epoch_order(24, 0, 0)
    two = [ResumableSampler(24, 0, r, 2) for r in range(2)]
    for sampler in two:
        _take(sampler, 3)  # 6 samples consumed globally
    state = two[0].state_dict()
    three = [ResumableSampler(24, 0, r, 3) for r in range(3)]
    for sampler in three:
        sampler.load_state_dict(state)
    rest = [list(s) for s in three]
    assert [len(r) for r in rest] == [6, 6, 6]
    assert sorted(i for share in rest for i in share) == sorted(order[6:].tolist())
    assert rest[0][:2] == order[[6, 9]].tolist()


def test_dataloader_resume_gives_the_same_batches():
    dataset = SyntheticDataset(num_samples=20, seq_len=8, seed=2)

    def loader(sampler):
        return torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)

    uninterrupted = [b["input_ids"] for b in loader(dataset.sampler())]
    sampler = dataset.sampler()
    first = []
    for batch in loader(sampler):
        first.append(batch["input_ids"])
        if len(first) == 2:
            break
    resumed = dataset.sampler(start_index=sampler.state_dict()["consumed"])
    assert resumed.consumed == 8 and len(resumed) == 12
    got = first + [b["input_ids"] for b in loader(resumed)]
    assert len(got) == len(uninterrupted) == 5
    for a, b in zip(got, uninterrupted, strict=True):
        assert torch.equal(a, b)


def test_bad_sampler_arguments_are_explained():
    with pytest.raises(ValueError, match="multiple of world_size=4"):
        ResumableSampler(40, 0, 0, 4, start_index=6)
    with pytest.raises(ValueError, match="rank < world_size"):
        ResumableSampler(40, 0, 4, 4)
    with pytest.raises(ValueError, match="fewer than world_size=8"):
        ResumableSampler(5, 0, 0, 8)
    with pytest.raises(ValueError, match="non-negative integer"):
        ResumableSampler(5, -1)
    sampler = ResumableSampler(40, seed=1)
    with pytest.raises(ValueError, match="saved with seed=2 .* start a new run"):
        sampler.load_state_dict({"consumed": 4, "seed": 2, "dataset_len": 40})
    with pytest.raises(ValueError, match="no 'consumed'"):
        sampler.load_state_dict({})
