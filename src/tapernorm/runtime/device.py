"""The torch device a `device` setting names (auto | cpu | cuda | cuda:N), and its autocast."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch


class DeviceError(RuntimeError):
    """A device setting names a device this process cannot use (the command ends in one line)."""


def resolve_device(
    name: str | torch.device, local_rank: int = 0, setting: str = "device"
) -> torch.device:
    """auto is cuda when torch sees a GPU, else cpu; a bare cuda is GPU `local_rank` (torchrun's
    LOCAL_RANK). `setting` names the option in the error raised when CUDA is asked for but absent,
    or the GPU is not among those visible (more torchrun processes than GPUs)."""
    if str(name) == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"{setting} is '{name}' but no CUDA device is available")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    if device.type == "cuda" and device.index >= torch.cuda.device_count():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise DeviceError(
            f"{setting} is '{name}': this process's GPU is cuda:{device.index}, but "
            f"{torch.cuda.device_count()} GPU(s) are visible"
            + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
            + ": start at most one process per visible GPU (torchrun --nproc_per_node)"
        )
    return device


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` says memory ran out: MemoryError, torch's OutOfMemoryError (a GPU) or its CPU
    allocator's RuntimeError."""
    if isinstance(e, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)


def autocast_for(device: torch.device, dtype: str) -> AbstractContextManager:
    """bf16 autocast when train.dtype is bfloat16, or auto on a GPU; otherwise no autocast."""
    use_bf16 = dtype == "bfloat16" or (dtype == "auto" and device.type == "cuda")
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()
