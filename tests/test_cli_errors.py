"""Which errors of a command end in one line: the project's own error classes and the known data and
file errors do; any other exception, torch's RuntimeError about shapes or CUDA among them, keeps its
traceback (cli_errors)."""

import pytest
import torch

import tapernorm.training.evaluation
from tapernorm.cli import main
from tapernorm.cli.errors import one_line
from tapernorm.data.hf_datasets import DataUnavailableError
from tapernorm.runtime.device import DeviceError, resolve_device
from tapernorm.training.checkpoint import CheckpointError

EVAL = ["eval", "--model", "m", "--data", "d", "--device", "cpu"]


def raising(error: BaseException):
    def evaluate_model(*args, **kwargs):
        raise error

    return evaluate_model


def torch_shape_error() -> RuntimeError:
    try:
        torch.zeros(2, 3) @ torch.zeros(2, 3)
    except RuntimeError as e:
        return e
    raise AssertionError("torch multiplied a 2x3 by a 2x3")


@pytest.mark.parametrize(
    "error",
    [
        CheckpointError("run m has no model.safetensors"),
        DataUnavailableError("no network and no local copy of the set"),
        DeviceError("device is 'cuda' but no CUDA device is available"),
        FileNotFoundError("m/config.json"),
        ValueError("--windows must be positive"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_our_errors_and_file_errors_end_in_one_line(error, monkeypatch, capsys):
    monkeypatch.delenv("TAPERNORM_TRACEBACK", raising=False)
    monkeypatch.setattr(tapernorm.training.evaluation, "evaluate_model", raising(error))
    assert main(EVAL) == 2
    err = capsys.readouterr().err
    assert err == f"tapernorm eval: error: {error}\n"


@pytest.mark.parametrize(
    "error",
    [torch_shape_error(), RuntimeError("CUDA error: an illegal memory access"), KeyError("x")],
    ids=["torch-shape", "plain-RuntimeError", "KeyError"],
)
def test_other_errors_keep_their_traceback(error, monkeypatch):
    monkeypatch.delenv("TAPERNORM_TRACEBACK", raising=False)
    monkeypatch.setattr(tapernorm.training.evaluation, "evaluate_model", raising(error))
    assert one_line(error, "eval") is None
    with pytest.raises(type(error)) as raised:
        main(EVAL)
    assert raised.value is error


def test_a_missing_cuda_device_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError) as e:
        resolve_device("cuda", setting="--device")
    assert one_line(e.value, "eval") == (f"error: {e.value}", 2)
