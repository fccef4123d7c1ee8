"""Data parallelism under torchrun: this process's rank, its share of each step's micro-batches,
the model wrapped in DistributedDataParallel (gradients summed over the processes in buckets, while
the backward runs) and sums over the processes of small statistics."""

import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..model import GPT
from ..norms import Reduce

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
    def from_env(cls) -> "World":
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


# (evaluated annotations: DDP checks that a communication hook's are GradBucket and Future[Tensor])
def sum_gradients(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: a bucket of gradients summed over the processes (DDP's own hook
    averages). Each process's loss is already its micro-batches' share of the step's mean (divided
    by train.grad_accum, the global count), so the sum is the gradient one process would take."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _no_buffer_sync() -> dict:
    """DDP's option that turns off its broadcast of the buffers before each forward (torch 2.13
    renamed it)."""
    params = inspect.signature(DistributedDataParallel.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: False}


def data_parallel(model: GPT, world: World, device: torch.device) -> DistributedDataParallel | None:
    """`model` in DistributedDataParallel for several processes (None for one: it trains the bare
    model). Gradients are summed (sum_gradients) in buckets as the backward produces them. No
    buffer broadcast before each forward: the buffers (TaperNorm's gate, c and EMAs, FakeNorm's
    scale) start equal (DDP copies rank 0's once, at construction) and are kept equal by the
    explicit sums over processes (make_reduce). find_unused_parameters is on: a tapered norm leaves
    gamma_tilde out of the graph while g = 1 and gamma once g = 0; DDP leaves the gradient of a
    parameter that no process used as it was (None), as one process would."""
    if world.size == 1:
        return None
    ddp = DistributedDataParallel(
        model,
        device_ids=[device] if device.type == "cuda" else None,
        find_unused_parameters=True,
        **_no_buffer_sync(),
    )
    ddp.register_comm_hook(None, sum_gradients)
    return ddp


class ModelHidden:
    """h_L of the model's last training forward (grad enabled), as the model returned it. DDP
    (with find_unused_parameters) hands a forward's outputs back through one autograd node of its
    own, each output apart: the loss of the logits has no gradient path to DDP's copy of h, and
    the diagnostic dCE/dh (diagnostics.prelogit_geometry) differentiates with respect to this one
    (the same values)."""

    def __init__(self, model: GPT):
        self.h: torch.Tensor | None = None
        model.register_forward_hook(self._keep)

    def _keep(self, module: GPT, args: tuple, output) -> None:
        if module.training and torch.is_grad_enabled() and isinstance(output, tuple):
            self.h = output[1]


def barrier(world: World) -> None:
    """Wait for every process (nothing to wait for with one)."""
    if world.size > 1:
        dist.barrier()
