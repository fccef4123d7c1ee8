"""GPUs per job on one machine: `tapernorm gpus N -- COMMAND ...` claims N free GPUs, shows the
command only those (CUDA_VISIBLE_DEVICES) and holds them for the command's lifetime.

Snakemake counts the `gpu` resource but assigns no device: without this, every job that holds one
GPU would train on cuda:0. A GPU is claimed by an exclusive flock on its slot file,
<slots>/gpu-<id>.lock (SLOTS_ENV, default DEFAULT_SLOTS: one directory per machine, shared by every
checkout and user of it). `tapernorm gpus` then becomes the command (exec: same pid, the slot
files still open), so the claim lasts exactly as long as the command's process (torchrun, which
stops its ranks when it ends); the kernel drops it when that ends, crashed or not, and a slot file
left behind holds nothing.

Nothing is claimed when the job holds no GPU, runs on the CPU (device cpu, or auto where torch sees
no GPU), or already has its GPUs: CUDA_VISIBLE_DEVICES set by a scheduler (inside a SLURM job) or
by an enclosing `tapernorm gpus` (CLAIMED_ENV). A CUDA_VISIBLE_DEVICES set by hand outside a
scheduler is the set of GPUs to share out. A command that starts more processes, one per GPU, than
the job holds (Snakemake scales a gpu=4 request down to --resources gpu=1) is refused before it
starts, in one line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..runtime import bookkeeping, jsonio
from ..runtime.links import open_own

log = logging.getLogger(__name__)

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
CLAIMED_ENV = "TAPERNORM_GPUS_CLAIMED"  # set for the command: its CUDA_VISIBLE_DEVICES is its own
SLOTS_ENV = "TAPERNORM_GPU_SLOTS"  # the directory of the slot files
DEFAULT_SLOTS = "/tmp/tapernorm-gpu-slots"  # per machine, not per checkout: GPUs are per machine
SCHEDULER_ENVS = ("SLURM_JOB_ID",)  # inside such a job, CUDA_VISIBLE_DEVICES is the job's grant
POLL_S = 2.0  # how often a waiting claim looks again


class GpuSlotError(RuntimeError):
    """The job cannot have the GPUs it asks for (too few, or all held with no waiting)."""


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES (ordinals or UUIDs), or None when it is not set."""
    value = environ.get(VISIBLE_ENV)
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def granted(environ: Mapping[str, str]) -> bool:
    """Whether CUDA_VISIBLE_DEVICES is this job's own grant: set inside a scheduler's job or by an
    enclosing `tapernorm gpus`, rather than by hand for the whole machine."""
    return VISIBLE_ENV in environ and any(k in environ for k in (CLAIMED_ENV, *SCHEDULER_ENVS))


def _torch_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_pool(
    gpus: int,
    ranks: int,
    device: str,
    environ: Mapping[str, str],
    gpu_count: Callable[[], int] = _torch_gpu_count,
) -> list[str] | None:
    """The GPUs a job holding `gpus` GPUs claims its GPUs from, or None when it claims none (see
    the module's docstring). `ranks`: processes the command starts, one per GPU; `device`: the
    config's auto | cpu | cuda (auto: a GPU when `gpu_count()`, what torch sees here, is not 0).
    GpuSlotError when the job holds fewer GPUs than it starts processes on them, or asks for more
    than there are."""
    if gpus <= 0 or device == "cpu":
        return None
    if device == "auto" and not gpu_count():
        return None  # auto where torch sees no GPU: the command runs on the CPU
    visible = visible_devices(environ)
    if ranks > gpus:
        raise GpuSlotError(
            f"the command starts {ranks} processes, one per GPU, but the job holds {gpus} GPU"
            f"{'s' if gpus > 1 else ''} (Snakemake gives a job at most --resources gpu=N, this "
            f"machine's count): run it where {ranks} GPUs are available, or give it fewer processes"
        )
    if granted(environ):
        if len(visible) < ranks:
            raise GpuSlotError(
                f"the command starts {ranks} processes, one per GPU, but {VISIBLE_ENV}="
                f"{environ[VISIBLE_ENV]!r} grants this job {len(visible)}: ask the scheduler for "
                f"{ranks} GPUs on one node"
            )
        return None
    pool = visible if visible is not None else [str(i) for i in range(gpu_count())]
    if not pool:
        return None  # device cuda without a GPU: the command says so itself
    if gpus > len(pool):
        raise GpuSlotError(
            f"the job holds {gpus} GPUs but this machine has {len(pool)} ({', '.join(pool)}): "
            f"lower the job's GPUs or run it on a larger machine"
        )
    return pool


def slots_dir(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(SLOTS_ENV) or DEFAULT_SLOTS)


def _slot_name(device: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", device) + ".lock"


def _open_slot(directory: Path, device: str) -> int:
    """The slot file of `device`, opened; shared by every user of the machine (mode 1777 on the
    directory, 666 on the files), so each user's jobs see the others' claims."""
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            os.chmod(directory, 0o1777)
    path = directory / _slot_name(device)
    try:
        fd = open_own(path, os.O_RDWR | os.O_CREAT, "a GPU slot file")
    except PermissionError:
        raise GpuSlotError(
            f"cannot open the GPU slot file {path} (another user's?): set {SLOTS_ENV} to a "
            "directory that every user of these GPUs can write"
        ) from None
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)
    return fd


def _holder(fd: int, path: Path) -> str:
    """Who holds a slot, as its holder wrote it: 'pid P on HOST (COMMAND)' ('?' while the file is
    empty: its holder is between truncating and writing it). BookkeepingError if it is damaged."""
    data = os.pread(fd, 4096, 0)
    info = bookkeeping.parse(bookkeeping.GPU_SLOT, path, data) if data else {}
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')} ({info.get('command', '?')})"


def _try_claim(n: int, pool: list[str], directory: Path) -> tuple[dict[str, int], dict[str, str]]:
    """Locks on the first `n` free devices of `pool` ({device: fd}), or none if fewer are free;
    and {device: holder} of those held by others."""
    claimed: dict[str, int] = {}
    held: dict[str, str] = {}
    for device in pool:
        fd = _open_slot(directory, device)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            try:
                held[device] = _holder(fd, directory / _slot_name(device))
            except bookkeeping.BookkeepingError:
                for other in claimed.values():
                    os.close(other)
                raise
            finally:
                os.close(fd)
            continue
        claimed[device] = fd
        if len(claimed) == n:
            return claimed, held
    for fd in claimed.values():  # not enough: hold none (a job never sits on part of its GPUs)
        os.close(fd)
    return {}, held


def claim(
    n: int,
    pool: list[str],
    directory: Path,
    command: str = "",
    wait: bool = True,
    poll_s: float = POLL_S,
) -> dict[str, int]:
    """Exclusive locks on `n` free GPUs of `pool`, {device: open slot file}: held until the files
    are closed or their process (and any process that inherited them) ends. Waits while fewer
    than `n` are free (logging once who holds them), or with wait=False raises GpuSlotError."""
    logged = False
    while True:
        claimed, held = _try_claim(n, pool, directory)
        if claimed:
            break
        holders = "; ".join(f"GPU {d}: {h}" for d, h in held.items())
        if not wait:
            raise GpuSlotError(
                f"{n} free GPU{'s' if n > 1 else ''} wanted, but only {len(pool) - len(held)} of "
                f"{len(pool)} free ({holders}; slot files in {directory})"
            )
        if not logged:
            log.info("waiting for %d free GPU(s) of %s: %s", n, ",".join(pool), holders)
            logged = True
        time.sleep(poll_s)
    record = jsonio.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command})
    for fd in claimed.values():
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
    return claimed


def run_on_gpus(
    gpus: int,
    command: list[str],
    device: str = "cuda",
    ranks: int = 1,
    wait: bool = True,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Exec `command` with `gpus` GPUs of its own (see the module's docstring); never returns.
    `ranks`: the processes it starts, one per GPU (torchrun's --nproc_per_node)."""
    if not command:
        raise GpuSlotError("no command given (tapernorm gpus N -- COMMAND ...)")
    env = dict(os.environ if environ is None else environ)
    pool = device_pool(gpus, ranks, device, env)
    if pool is not None:
        directory = slots_dir(env)
        claimed = claim(gpus, pool, directory, " ".join(command)[:200], wait)
        for fd in claimed.values():
            os.set_inheritable(fd, True)  # the claim lives as long as the command
        env[VISIBLE_ENV] = ",".join(claimed)
        env[CLAIMED_ENV] = "1"
        log.info(
            "GPU%s %s for this job (slot files in %s)",
            "s" if len(claimed) > 1 else "",
            env[VISIBLE_ENV],
            directory,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        raise GpuSlotError(f"command not found: {command[0]}") from None
