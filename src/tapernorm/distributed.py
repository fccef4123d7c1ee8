"""Data parallelism under torchrun: this process's rank, its share of each step's micro-batches,
and sums over the processes (of gradients and of small statistics)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .model import GPT
from .norms import Reduce

# How long a process waits in a collective for the others before the group gives up (NCCL's
# default: 10 minutes). Rank 0 alone writes each checkpoint while the other ranks wait in the next
# step's all-reduce: for GPT-2 XL, 1.56B fp32 weights and AdamW's two moments, ~19 GB written and
# read back for its digest, 6.5 minutes at 100 MB/s and 13 at 50; its final evaluation and weights
# come on top at the end. An hour lets a shared filesystem be that slow (~11 MB/s) without
# killing the run; a rank that really hangs still ends it, an hour later.
PROCESS_GROUP_TIMEOUT = timedelta(hours=1)


@dataclass(frozen=True)
class World:
    """This process among torchrun's data-parallel processes (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> World:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))


@contextmanager
def process_group(world: World, device: torch.device) -> Iterator[None]:
    """Joined to torchrun's process group (NCCL on GPUs, gloo on CPUs; collectives wait up to
    PROCESS_GROUP_TIMEOUT) inside the block, unless this is the only process or the group exists
    already."""
    if world.size == 1 or dist.is_initialized():
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=PROCESS_GROUP_TIMEOUT)
    try:
        yield
    finally:
        dist.destroy_process_group()


def rank_micro_batches(accum: int, rank: int, world_size: int) -> list[int]:
    """The micro-batches of each step that `rank` computes: rank, rank + W, ..., so that the W
    ranks together compute exactly the `accum` micro-batches a single process would."""
    if accum < world_size:
        raise ValueError(
            f"train.grad_accum={accum} is smaller than the {world_size} processes: every process "
            "needs at least one micro-batch per step (raise grad_accum, lower batch_size)"
        )
    return list(range(rank, accum, world_size))


def make_reduce(world: World, device: torch.device) -> Reduce | None:
    """A sum over all processes of a small tensor on this process's device, returned on that
    device (None for a single process): statistics never leave the device to be summed."""
    if world.size == 1:
        return None

    def reduce(stats: torch.Tensor) -> torch.Tensor:
        stats = stats.to(device)  # a no-op for the model's own statistics; NCCL wants GPU tensors
        dist.all_reduce(stats)
        return stats

    return reduce


def sum_grads(model: GPT, world: World) -> None:
    """Sum every gradient over the processes: each holds its micro-batches' share of the mean."""
    if world.size > 1:
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)


def barrier(world: World) -> None:
    """Wait for every process (nothing to wait for with one)."""
    if world.size > 1:
        dist.barrier()
