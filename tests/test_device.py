"""One device resolver for training, evaluation, export and the benchmarks."""

import pytest
import torch

from tapernorm.runtime.device import resolve_device


def fake_gpus(monkeypatch, n: int) -> None:
    """torch sees `n` GPUs (none: no CUDA)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


def test_auto_follows_what_torch_sees(monkeypatch):
    fake_gpus(monkeypatch, 0)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu", local_rank=3) == torch.device("cpu")
    fake_gpus(monkeypatch, 1)
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_bare_cuda_is_the_local_rank_gpu(monkeypatch):
    fake_gpus(monkeypatch, 4)
    assert resolve_device("cuda", local_rank=2) == torch.device("cuda", 2)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:3", local_rank=1) == torch.device("cuda", 3)  # an explicit index
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 0)


@pytest.mark.parametrize("name", ["cuda", torch.device("cuda"), "cuda:1"])
def test_cuda_without_a_gpu_names_the_setting(name, monkeypatch):
    fake_gpus(monkeypatch, 0)
    with pytest.raises(RuntimeError, match="^train.device is 'cuda.*' but no CUDA device is avail"):
        resolve_device(name, setting="train.device")
    with pytest.raises(RuntimeError, match="^device is 'cuda"):
        resolve_device(name)


def test_more_ranks_than_visible_gpus_is_one_clear_error(monkeypatch):
    """torchrun started 4 processes on a job that sees 1 GPU: rank 3 would be cuda:3."""
    fake_gpus(monkeypatch, 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with pytest.raises(RuntimeError) as e:
        resolve_device("cuda", local_rank=3, setting="train.device")
    assert str(e.value) == (
        "train.device is 'cuda': this process's GPU is cuda:3, but 1 GPU(s) are visible "
        "(CUDA_VISIBLE_DEVICES=2): start at most one process per visible GPU "
        "(torchrun --nproc_per_node)"
    )
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)
    fake_gpus(monkeypatch, 0)  # gloo ranks on a CPU with device auto: no GPU wanted, no error
    assert resolve_device("auto", local_rank=3) == torch.device("cpu")
