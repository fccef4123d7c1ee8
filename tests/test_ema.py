"""The one bias-corrected EMA (norms.fold_ema_) computes bit for bit what each of its three former
copies did: TaperNorm.update_calibration, FakeNorm.update / remove and ScaleAnchor.update, copied
verbatim below from before the merge (commit a972cec; the frozen flag read as is_frozen, its one
name now) and compared with torch.equal."""

import pytest
import torch

from tapernorm.anchor import ScaleAnchor
from tapernorm.norms import FakeNorm, TaperNorm, bias_correction, ema_update_

# ---- the former formulas, verbatim (self -> m), on a module's buffers ------------------------------


def old_taper_update(m, mu, reduce=None):
    pending, m._pending = m._pending, []
    if m.host("frozen") or not pending:
        return
    stats = torch.stack(pending).double()
    total = torch.cat([stats.sum(0), stats.new_full((1,), float(len(pending)))])
    if reduce is not None:
        total = reduce(total)
    mean = total[:2] / total[2]
    ema_update_(m.ema_num, mean[0], mu)
    ema_update_(m.ema_den, mean[1], mu)
    count = m.host("ema_count") + 1
    m.set_host("ema_count", count)
    correction = bias_correction(mu, count)
    m.c.copy_((m.ema_num / correction) / (m.ema_den / correction + m.delta))


def old_fake_update(m, mu, reduce=None):
    pending, m._pending = m._pending, []
    if m.is_frozen or not pending:
        return
    stats = torch.stack(pending).double()
    total = torch.stack([stats.sum(), stats.new_full((), float(len(pending)))])
    if reduce is not None:
        total = reduce(total)
    ema_update_(m.ema, total[0] / total[1], mu)
    m.set_host("ema_count", m.host("ema_count") + 1)


def old_fake_remove(m, mu):
    if not m.is_frozen:
        count = m.host("ema_count")
        if count == 0:
            raise RuntimeError("FakeNorm.remove: no step recorded its average scale yet")
        m.scale.copy_(m.ema.double() / bias_correction(mu, count))
        m.set_host("removed", True)
    m._pending.clear()
    return m.scale.detach().clone()


def old_anchor_update(m, mu, reduce=None):
    pending, m._pending = m._pending, []
    if m.is_frozen or not pending:
        return
    total = pending[0].double()
    for s in pending[1:]:
        total = total + s.double()
    total = torch.stack([total, total.new_full((), float(len(pending)))])
    if reduce is not None:
        total = reduce(total)
    ema_update_(m.ema, total[0] / total[1], mu)
    count = m.host("ema_count") + 1
    m.set_host("ema_count", count)
    m.target.copy_(m.ema / bias_correction(mu, count))


# ---- new and old side by side on the same random inputs --------------------------------------------

REDUCES = {"none": None, "two processes": lambda t: t + t * 1.0000001}


def _steps(seed: int, n_steps: int = 12, d: int = 24):
    """Per step, a list of micro-batches (1-5) of random residual states at random scales."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_steps):
        n_micro = int(torch.randint(1, 6, (1,), generator=g))
        yield [
            torch.randn(3, 5, d, generator=g) * float(torch.rand(1, generator=g) * 20 + 0.01)
            for _ in range(n_micro)
        ]


def _same_buffers(a, b) -> None:
    for (name, x), (_, y) in zip(a.named_buffers(), b.named_buffers(), strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y), name


@pytest.mark.parametrize("reduce", REDUCES.values(), ids=REDUCES)
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("mu", [0.5, 0.01, 1e-3])
def test_taper_calibration_bitwise(kind, mu, reduce):
    new, old = TaperNorm(24, kind).train(), TaperNorm(24, kind).train()
    with torch.no_grad():
        w = torch.rand(24, generator=torch.Generator().manual_seed(1)) + 0.5
        new.weight.copy_(w), old.weight.copy_(w)
    for micro in _steps(seed=int(mu * 1000) + len(kind)):
        for h in micro:
            new(h), old(h)
        new.update_calibration(mu, reduce)
        old_taper_update(old, mu, reduce)
        _same_buffers(new, old)
        assert torch.equal(new.c, old.c) and new.host("ema_count") == old.host("ema_count")


@pytest.mark.parametrize("reduce", REDUCES.values(), ids=REDUCES)
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("mu", [0.5, 0.01, 1e-3])
def test_fakenorm_ema_and_freeze_bitwise(kind, mu, reduce):
    new, old = FakeNorm(24, kind).train(), FakeNorm(24, kind).train()
    for micro in _steps(seed=7 + len(kind)):
        for h in micro:
            new(h), old(h)
        new.update(mu, reduce)
        old_fake_update(old, mu, reduce)
        _same_buffers(new, old)
    assert torch.equal(new.freeze(mu), old_fake_remove(old, mu))
    _same_buffers(new, old)


@pytest.mark.parametrize("reduce", REDUCES.values(), ids=REDUCES)
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("mu", [0.5, 0.01, 1e-3])
def test_anchor_target_bitwise(kind, mu, reduce):
    new, old = ScaleAnchor(kind), ScaleAnchor(kind)
    for micro in _steps(seed=11 + len(kind)):
        for h in micro:
            new.loss(h), old.loss(h)
        new.update(mu, reduce)
        old_anchor_update(old, mu, reduce)
        _same_buffers(new, old)
        assert torch.equal(new.target, old.target)
