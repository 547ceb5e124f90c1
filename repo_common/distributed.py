"""Work shared across torchrun ranks, for the commands that are not Lightning: the search and the evaluation.

Both split a list of independent units (batches of prompts) across ranks and
put the results back together so that they equal a one-process run. This
module holds the three things they share:

- `init_distributed` joins the torchrun process group (NCCL on GPUs, each
  rank on its own device `LOCAL_RANK`; gloo on CPU) and `rank_and_world`
  says who this process is; `barrier` is a no-op in one process.
- `balanced_shares` assigns units to ranks by their cost (longest first, each
  to the least-loaded rank): deterministic, so every rank computes the same
  assignment from the same inputs without talking to the others, and a unit
  runs exactly as it would in one process (the same batch, the same padding).
- `all_reduce_sum` sums a tensor over ranks on the backend's device.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Sequence

import torch
import torch.distributed as dist


def init_distributed() -> bool:
    """Join the torchrun process group (gloo on CPU, nccl on GPU) if launched by torchrun; True if this call did."""
    if not dist.is_available() or dist.is_initialized() or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")
    return True


def close_distributed(started: bool) -> None:
    """Leave the process group `init_distributed` joined (`started` = its return value)."""
    if started and dist.is_initialized():
        dist.destroy_process_group()


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait for every rank (nothing to wait for in one process)."""
    if rank_and_world()[1] > 1:
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of `tensor` over ranks, on `tensor`'s device (NCCL reduces on this rank's GPU)."""
    if rank_and_world()[1] == 1:
        return tensor
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else tensor.device
    shared = tensor.to(device)
    dist.all_reduce(shared, op=dist.ReduceOp.SUM)
    return shared.to(tensor.device)


def balanced_shares(costs: Sequence[float], world_size: int) -> list[list[int]]:
    """Unit indices per rank, balancing the summed cost: the costliest unit first, each to the least-loaded rank.

    Ties go to the lower rank and, among equal costs, to the earlier unit, so the
    result depends on the costs alone. Each rank's indices come back in
    increasing order (the units' own order). Greedy longest-first is within
    4/3 of the best possible makespan.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    loads = [(0.0, rank) for rank in range(world_size)]
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for index in sorted(range(len(costs)), key=lambda i: (-float(costs[i]), i)):
        load, rank = heapq.heappop(loads)
        shares[rank].append(index)
        heapq.heappush(loads, (load + float(costs[index]), rank))
    return [sorted(share) for share in shares]
