"""`tapernorm selftest`: on `meta` it passes, and a tensor made on the host or a read of a device
value in a training step (each defect the first CUDA review found, planted back) fails its check."""

import pytest
import torch

from tapernorm.anchor import ScaleAnchor
from tapernorm.cli import main
from tapernorm.config import resolve_run_config
from tapernorm.machine import selftest
from tapernorm.norms import FakeNorm, TaperNorm


def test_selftest_on_meta_passes(capsys):
    assert main(["selftest", "--device", "meta"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(
        f"selftest on meta: {len(selftest.TRAIN_CHECKS) - 1} passed, 0 failed"
    )
    for check in selftest.TRAIN_CHECKS[:-2]:  # bf16 and compile have no meta kernels to run
        assert any(line.startswith(f"PASS  {check.name}") for line in out), check.name
    assert any(line.startswith("PASS  decode, KV cache, eager") for line in out)


def test_selftest_configs_are_resolved_run_configs(tmp_path):
    """The selftest builds its configs without jsonschema: each must be what the schema resolves."""
    for check in selftest.TRAIN_CHECKS:
        cfg = check.config(str(tmp_path), "cpu", "auto", str(tmp_path / "init"))
        assert resolve_run_config(cfg.to_dict()) == cfg, check.name


# ---- the defects, planted back: each was in the code before the GPU review's fixes ---------------


def _host_count_in_calibration(self, mu, reduce=None):
    stats = torch.stack(self._pending).double()
    torch.cat([stats.sum(0), torch.tensor([len(stats)], dtype=torch.float64)])  # a host tensor


def _host_count_in_fakeln(self, mu, reduce=None):
    stats = torch.stack(self._pending).double()
    torch.stack([stats.sum(), torch.tensor(float(len(stats)), dtype=torch.float64)])


def _read_back_in_anchor(self, mu, reduce=None):
    [float(s) for s in self._pending]  # the anchor used to hold Python floats: a read per batch


@pytest.mark.parametrize(
    "cls, method, plant, check",
    [
        (
            TaperNorm,
            "update_calibration",
            _host_count_in_calibration,
            "Internal-Taper (+aux, Eq. 5)",
        ),
        (FakeNorm, "update", _host_count_in_fakeln, "gpt2 FakeLN"),
        (ScaleAnchor, "update", _read_back_in_anchor, "All-Taper (+aux, relative form)"),
    ],
)
def test_a_planted_host_tensor_fails_its_check_on_meta(monkeypatch, cls, method, plant, check):
    monkeypatch.setattr(cls, method, plant)
    lines = []
    results = selftest.run_selftest("meta", only=check, report=lines.append)
    result = results[0]  # the training check; its fold and decode checks are skipped on meta
    assert result.name.endswith(check)
    assert result.status == "fail"
    assert "device" in result.detail or "meta" in result.detail, result.detail
    assert lines[-1].endswith(f"FAILED: {result.name}")
