"""One device resolver for training, evaluation, export and the benchmarks."""

import pytest
import torch

from tapernorm.device import resolve_device


def test_auto_follows_what_torch_sees(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu", local_rank=3) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_bare_cuda_is_the_local_rank_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda", local_rank=2) == torch.device("cuda", 2)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:3", local_rank=1) == torch.device("cuda", 3)  # an explicit index
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 0)


@pytest.mark.parametrize("name", ["cuda", torch.device("cuda"), "cuda:1"])
def test_cuda_without_a_gpu_names_the_setting(name, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="^train.device is 'cuda.*' but no CUDA device is avail"):
        resolve_device(name, setting="train.device")
    with pytest.raises(RuntimeError, match="^device is 'cuda"):
        resolve_device(name)
