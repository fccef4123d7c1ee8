"""The paper's three propositions (Sec. 4), checked numerically on random inputs."""

import pytest
import torch
import torch.nn.functional as F

from tapernorm import ScaleAnchor
from tapernorm.norms import token_scale


def test_prop_4_1_zero_homogeneous_final_norm_gradient_orthogonal_to_h():
    torch.manual_seed(0)
    d, V = 48, 97
    w_out, gamma = torch.randn(d, V), torch.rand(d) + 0.5
    for norm in ("rms", "layer"):
        h = torch.randn(64, d, dtype=torch.float64, requires_grad=True)
        if norm == "rms":
            z = F.rms_norm(h, (d,), gamma.double(), eps=0.0) @ w_out.double()
        else:
            z = F.layer_norm(h, (d,), gamma.double(), None, eps=0.0) @ w_out.double()
        loss = F.cross_entropy(z, torch.randint(0, V, (64,)), reduction="sum")
        (grad,) = torch.autograd.grad(loss, h)
        inner = (grad * h).sum(-1)
        assert inner.abs().max() < 1e-10 * grad.norm(dim=-1).max() * h.norm(dim=-1).max()


def test_prop_4_2_no_final_norm_positive_margin_grows_h():
    torch.manual_seed(1)
    d, V, n = 32, 50, 256
    w_out = torch.randn(d, V, dtype=torch.float64)
    h = torch.randn(n, d, dtype=torch.float64) * 2
    z = h @ w_out
    y = z.argmax(-1)  # the model is right: positive margin
    h.requires_grad_(True)
    z = h @ w_out
    loss = F.cross_entropy(z, y, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), h)
    inner = (grad * h).sum(-1)
    p_y = F.softmax(z, -1).gather(-1, y[:, None]).squeeze(-1)
    top2 = z.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    assert (margin > 0).all()
    bound = -(1 - p_y) * margin
    assert (inner <= bound + 1e-9).all()
    assert (inner < 0).all()


def test_prop_4_3_scale_loss_is_a_restoring_force():
    torch.manual_seed(2)
    d, lam, s_tgt = 64, 0.1, 1.3
    h = torch.randn(10, d, dtype=torch.float64) * torch.linspace(0.1, 4, 10)[:, None]
    h.requires_grad_(True)
    r = token_scale(h, "rms", eps=0.0)
    loss = lam * (r - s_tgt).pow(2)
    (grad,) = torch.autograd.grad(loss.sum(), h)
    inner = (grad * h).sum(-1)
    hd = h.detach()
    rd = r.detach()
    expected = 2 * lam * (rd - s_tgt) / (d * rd) * hd.pow(2).sum(-1)
    assert torch.allclose(inner, expected, rtol=1e-10, atol=1e-12)
    assert ((inner > 0) == (rd > s_tgt)).all()  # pushes r(h) towards s_tgt from either side


def test_anchor_target_is_bias_corrected_ema_and_frozen():
    a = ScaleAnchor("rms", lam=0.1, eps=1e-5)
    h1, h2 = torch.randn(2, 5, 16), torch.randn(2, 5, 16) * 3
    s1 = token_scale(h1, "rms").mean().item()
    s2 = token_scale(h2, "rms").mean().item()
    assert a.loss(h1).item() == 0.0  # inactive before the taper starts
    a.update(0.1)
    assert abs(float(a.target) - s1) < 1e-5
    a.loss(h2)
    a.update(0.1)
    expected = (0.1 * 0.9 * s1 + 0.1 * s2) / (1 - 0.9**2)
    assert abs(float(a.target) - expected) < 1e-5
    tgt = a.freeze()
    a.loss(h1 * 100)
    a.update(0.1)
    assert float(a.target) == tgt
    s = token_scale(h2, "rms")
    assert torch.allclose(a.loss(h2), 0.1 * (s - tgt).pow(2).mean())


def _radial_force(form: str, h: torch.Tensor, s_tgt: float, lam: float = 0.1) -> torch.Tensor:
    """<grad_h L_aux, h> per token for a frozen ScaleAnchor of `form` at target s_tgt."""
    a = ScaleAnchor("rms", lam=lam, eps=0.0, form=form).double()
    a.ema.fill_(s_tgt)
    a.ema_count.fill_(10**6)  # bias correction ~1: target = s_tgt
    a.target.fill_(s_tgt)
    a.freeze()
    h = h.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(a.loss(h[None]) * h.shape[0], h)  # per-token sum, not mean
    return (grad * h).sum(-1).detach()


def test_relative_anchor_is_a_restoring_force_with_the_closed_form():
    torch.manual_seed(3)
    d, lam, s_tgt = 64, 0.1, 1.3
    h = torch.randn(10, d, dtype=torch.float64) * torch.linspace(0.1, 4, 10)[:, None]
    inner = _radial_force("relative", h, s_tgt, lam)
    r = token_scale(h, "rms", eps=0.0)
    expected = 2 * lam * (r / s_tgt - 1) / (d * r * s_tgt) * h.pow(2).sum(-1)
    assert torch.allclose(inner, expected, rtol=1e-5, atol=1e-8)  # the loss runs in float32
    assert ((inner > 0) == (r > s_tgt)).all()


def test_relative_anchor_is_scale_invariant_and_eq5_is_not():
    torch.manual_seed(4)
    h = torch.randn(12, 32, dtype=torch.float64) * torch.linspace(0.5, 2, 12)[:, None]
    for alpha in (0.1, 10.0):  # scale the residual stream and its target together
        rel = _radial_force("relative", alpha * h, alpha * 0.9) / _radial_force("relative", h, 0.9)
        eq5 = _radial_force("eq5", alpha * h, alpha * 0.9) / _radial_force("eq5", h, 0.9)
        assert torch.allclose(rel, torch.ones_like(rel), rtol=1e-4)
        assert torch.allclose(eq5, torch.full_like(eq5, alpha**2), rtol=1e-4)  # stiffness ~ s^2


def test_anchor_rejects_an_unknown_form():
    with pytest.raises(ValueError, match="form"):
        ScaleAnchor("rms", form="log")
