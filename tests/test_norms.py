"""TaperNorm's forward pass and the calibration of c (paper Eqs. 1-4, 6-7)."""

import pytest
import torch
import torch.nn.functional as F

from tapernorm import TaperNorm, set_gate
from tapernorm.anchor import ScaleAnchor
from tapernorm.norms import FakeNorm, freeze, token_scale, update_calibration


def _random_taper(kind: str, d: int = 32, seed: int = 0) -> TaperNorm:
    torch.manual_seed(seed)
    n = TaperNorm(d, kind)
    with torch.no_grad():
        n.weight.uniform_(0.5, 1.5)
        n.weight_tilde.uniform_(0.5, 1.5)
        n.c.fill_(0.37)
        if n.bias is not None:
            n.bias.normal_()
    return n


def test_gate_one_is_torch_rmsnorm():
    n = _random_taper("rms")
    ref = torch.nn.RMSNorm(32, eps=1e-5)
    ref.weight.data.copy_(n.weight.data)
    h = torch.randn(4, 7, 32) * 3
    assert (n(h) - ref(h)).abs().max() < 1e-6


def test_gate_one_is_torch_layernorm():
    n = _random_taper("layer")
    ref = torch.nn.LayerNorm(32, eps=1e-5)
    ref.weight.data.copy_(n.weight.data)
    ref.bias.data.copy_(n.bias.data)
    h = torch.randn(4, 7, 32) * 3 + 1.5
    assert (n(h) - ref(h)).abs().max() < 1e-6


def test_gate_zero_is_linear_map_rms():
    n = _random_taper("rms")
    set_gate(n, 0.0)
    h = torch.randn(4, 7, 32)
    assert torch.allclose(n(h), 0.37 * h * n.weight_tilde, atol=1e-6)
    assert torch.allclose(n(2 * h), 2 * n(h), atol=1e-6)  # sample-independent: linear


def test_gate_zero_is_centred_affine_map_layer():
    n = _random_taper("layer")
    set_gate(n, 0.0)
    h = torch.randn(4, 7, 32) + 2.0
    hbar = h - h.mean(-1, keepdim=True)
    assert torch.allclose(n(h), 0.37 * hbar * n.weight_tilde + n.bias, atol=1e-6)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_intermediate_gate_is_convex_mix(kind):
    n = _random_taper(kind)
    h = torch.randn(4, 7, 32) * 2
    set_gate(n, 1.0)
    a = n(h)
    set_gate(n, 0.0)
    b = n(h)
    set_gate(n, 0.3)
    assert torch.allclose(n(h), 0.3 * a + 0.7 * b, atol=1e-5)


def test_set_gate_rejects_out_of_range():
    with pytest.raises(ValueError, match="gate"):
        set_gate(TaperNorm(4), 1.5)


def _closed_form_c(h, gamma, kind, eps=1e-5):
    if kind == "layer":
        h = h - h.mean(-1, keepdim=True)
    scale = torch.sqrt(h.pow(2).mean(-1) + eps)
    sq = (h * gamma).pow(2).sum(-1)
    return ((sq / scale).mean() / sq.mean()).item()


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_calibration_matches_closed_form(kind):
    n = _random_taper(kind)
    n.train()
    h = torch.randn(8, 16, 32) * torch.linspace(0.2, 3.0, 32) + 0.5
    for _ in range(50):
        n(h)
        update_calibration(n, mu=0.01)
    expected = _closed_form_c(h, n.weight.detach(), kind)
    assert abs(float(n.c) - expected) / expected < 1e-4


def test_calibration_is_least_squares_fit():
    """c* minimises E||h gamma / r(h) - c h gamma||^2 over c."""
    n = _random_taper("rms")
    n.train()
    h = torch.randn(8, 16, 32) * 2
    n(h)
    update_calibration(n, mu=0.1)
    c = float(n.c)
    norm_branch = F.rms_norm(h, (32,), n.weight.detach(), 1e-5)

    def err(cc):
        return (norm_branch - cc * h * n.weight.detach()).pow(2).sum().item()

    assert err(c) <= min(err(c * 1.01), err(c * 0.99))


def test_bias_correction_after_few_updates():
    """Two updates with batch statistics x1 then x2: c = s_hat_num / s_hat_den with bias correction."""
    n = _random_taper("rms")
    n.train()
    mu = 0.01
    h1, h2 = torch.randn(4, 8, 32), torch.randn(4, 8, 32) * 5
    stats = []
    for h in (h1, h2):
        scale = torch.sqrt(h.pow(2).mean(-1) + 1e-5)
        sq = (h * n.weight.detach()).pow(2).sum(-1)
        stats.append(((sq / scale).mean().item(), sq.mean().item()))
        n(h)
        update_calibration(n, mu)
    corr = 1 - (1 - mu) ** 2
    num = (mu * (1 - mu) * stats[0][0] + mu * stats[1][0]) / corr
    den = (mu * (1 - mu) * stats[0][1] + mu * stats[1][1]) / corr
    assert abs(float(n.c) - num / (den + 1e-8)) / (num / den) < 1e-5
    # one update: the corrected EMA is exactly the batch statistic (no shrinkage towards s(0)=0)
    m = _random_taper("rms")
    m.train()
    m(h1)
    update_calibration(m, mu)
    assert abs(float(m.c) - stats[0][0] / stats[0][1]) < 1e-5


def test_no_calibration_without_training_mode_or_below_gate_one():
    n = _random_taper("rms")
    n.eval()
    n(torch.randn(2, 3, 32))
    update_calibration(n, 0.1)
    assert int(n.ema_count) == 0
    n.train()
    set_gate(n, 0.5)
    n(torch.randn(2, 3, 32))
    update_calibration(n, 0.1)
    assert int(n.ema_count) == 0


def test_taper_start_freezes_c_and_copies_gamma():
    n = _random_taper("rms")
    n.train()
    n(torch.randn(4, 8, 32))
    update_calibration(n, 0.1)
    c0 = float(n.c)
    freeze(n)
    assert torch.equal(n.weight_tilde, n.weight)
    set_gate(n, 1.0)  # even at g=1 again, a frozen c never changes
    for _ in range(3):
        n(torch.randn(4, 8, 32) * 10)
        update_calibration(n, 0.1)
    assert float(n.c) == c0


def test_taper_start_without_calibration_is_an_error():
    with pytest.raises(RuntimeError, match="never calibrated"):
        freeze(TaperNorm(8))


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_token_scale_is_the_former_inline_formula_bit_for_bit(kind):
    h = torch.randn(3, 5, 24) * 4 + 0.5
    former = h - h.mean(-1, keepdim=True) if kind == "layer" else h  # as each caller wrote it
    assert torch.equal(token_scale(h, kind), torch.sqrt(former.pow(2).mean(-1) + 1e-5))
    assert torch.equal(token_scale(former, "rms"), token_scale(h, kind))  # TaperNorm's centred call


def test_one_frozen_flag_under_the_state_dict_names_checkpoints_hold():
    taper, fake, anchor = TaperNorm(8), FakeNorm(8), ScaleAnchor()
    for module, buffer in ((taper, "frozen"), (fake, "removed"), (anchor, "frozen")):
        assert module.is_frozen is False
        state = module.state_dict()
        state[buffer] = torch.tensor(True)  # a checkpoint written after the freeze
        module.load_state_dict(state)
        assert module.is_frozen is True, type(module).__name__
