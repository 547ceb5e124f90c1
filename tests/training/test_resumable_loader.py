"""The training loader is resumable in Lightning's sense: its state is the data position of completed steps.

Lightning warns on every mid-run resume that a loader without `state_dict` / `load_state_dict` "is not
resumable"; these tests hold that the loader has them and that they really restore the position.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from lightning_fabric.utilities.types import _Stateful

from repo_train.data import SyntheticData
from repo_train.training.datamodule import RePoDataModule

SOURCE = SyntheticData(seq_len=8, num_samples=40, seed=3)
GLOBAL_BATCH, MICRO_BATCH, MAX_STEPS = 8, 2, 12  # 12 steps × 8 = 96 samples: the run crosses two data epochs


def _loader(rank: int, world: int, step: int = 0):
    """A rank's training loader as Lightning gets it, with a stand-in trainer at optimizer step `step`."""
    data = RePoDataModule(train=SOURCE, global_batch_size=GLOBAL_BATCH, micro_batch_size=MICRO_BATCH)
    data.build_sources()
    data.trainer = SimpleNamespace(global_rank=rank, world_size=world, max_steps=MAX_STEPS, global_step=step)
    return data, data.train_dataloader()


def _batches(loader, count=None):
    out = []
    for batch in loader:
        out.append(batch["input_ids"])
        if count is not None and len(out) == count:
            break
    return out


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("stop_at_step", [3, 7])  # mid-epoch: 40 samples are 5 steps of 8
def test_a_state_saved_mid_run_resumes_the_same_batches(world, stop_at_step):
    per_step = GLOBAL_BATCH // (MICRO_BATCH * world)  # micro-batches per optimizer step on each rank
    for rank in range(world):
        _, whole = _loader(rank, world)
        assert isinstance(whole, _Stateful)  # the test Lightning's warning makes
        uninterrupted = _batches(whole)
        assert len(uninterrupted) == MAX_STEPS * per_step

        data, first = _loader(rank, world)
        seen = _batches(first, stop_at_step * per_step + 1)  # one more: the batch Lightning has prefetched
        data.trainer.global_step = stop_at_step
        state = first.state_dict()
        assert state["consumed"] == stop_at_step * GLOBAL_BATCH  # completed steps, not what was fetched
        assert first.run_sampler.sampler.consumed > state["consumed"]
        buffer = io.BytesIO()
        torch.save(state, buffer)  # as in a checkpoint, read back weights-only
        buffer.seek(0)
        saved = torch.load(buffer, weights_only=True)

        _, resumed = _loader(rank, world)  # built at step 0: only load_state_dict moves it
        resumed.load_state_dict(saved)
        assert len(resumed) == (MAX_STEPS - stop_at_step) * per_step
        rest = _batches(resumed)
        got = seen[: stop_at_step * per_step] + rest
        assert len(got) == len(uninterrupted)
        for a, b in zip(got, uninterrupted, strict=True):
            assert torch.equal(a, b)


def test_a_state_saved_for_other_data_is_refused():
    _, loader = _loader(0, 1)
    state = loader.state_dict() | {"seed": 4, "consumed": 16}
    with pytest.raises(ValueError, match="saved with seed=4 but this sampler has seed=3"):
        loader.load_state_dict(state)
