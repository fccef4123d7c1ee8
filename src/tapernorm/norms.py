"""Every norm layer of the models, over one bias-corrected EMA (fold_ema_).

RMSNorm and LayerNorm (paper Eqs. 1-2); TaperNorm (Eqs. 3-4, 6-7) and FixedScale, a tapered norm
at g = 0 as an explicit op (the explicit-scaling export, fold.py); DyT, a norm-free baseline; FakeNorm,
a norm whose per-token scale becomes a fixed scalar (FakeLN; its removal schedule is in fakeln.py).
One verb for the moment a learned statistic stops moving: `freeze` (TaperNorm's c at taper start,
FakeNorm's s at its removal, the scale anchor's s_tgt in anchor.py), and one flag that says it did:
`is_frozen`. One function computes the per-token scale r(h) (sigma(h) for the layer kind) that they
all measure: `token_scale`.

TaperNorm mixes a normalizing branch and a sample-independent linear branch under one global gate g:

    rms:   g * (h / r(h)) * gamma                 + (1 - g) * c * h * gamma_tilde          (Eq. 3)
    layer: beta + g * ((h - mu) / sigma) * gamma  + (1 - g) * c * (h - mu) * gamma_tilde   (Eq. 6)

g = 1 is exactly the ordinary norm; g = 0 is a fixed linear (rms) or affine (layer) map that folds into
the next projection. c is calibrated while g = 1 by a bias-corrected EMA least-squares match of the two
branches (Eq. 4 / Eq. 7), then frozen when the taper starts, at which point gamma_tilde := gamma.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .runtime.host_state import HostState

NORM_KINDS = ("rms", "layer")
Reduce = Callable[[torch.Tensor], torch.Tensor]  # sums a tensor over data-parallel processes


class TaperNorm(HostState):
    """A norm that tapers into a learned sample-independent scale as the gate goes from 1 to 0."""

    HOST_BUFFERS = {"gate": float, "frozen": bool, "ema_count": int}

    def __init__(self, dim: int, kind: str = "rms", eps: float = 1e-5, delta: float = 1e-8):
        super().__init__()
        if kind not in NORM_KINDS:
            raise ValueError(f"TaperNorm kind must be one of {NORM_KINDS}, got {kind!r}")
        self.dim, self.kind, self.eps, self.delta = dim, kind, eps, delta
        self.weight = nn.Parameter(torch.ones(dim))  # gamma
        self.weight_tilde = nn.Parameter(torch.ones(dim))  # gamma_tilde
        self.bias = nn.Parameter(torch.zeros(dim)) if kind == "layer" else None  # beta
        self.register_buffer("gate", torch.tensor(1.0))
        self.register_buffer("c", torch.tensor(1.0))
        # calibration state: EMA numerator / denominator of Eq. 4, update count, frozen flag
        self.register_buffer("ema_num", torch.tensor(0.0))
        self.register_buffer("ema_den", torch.tensor(0.0))
        self.register_buffer("ema_count", torch.tensor(0, dtype=torch.long))
        self.register_buffer("frozen", torch.tensor(False))
        self._pending: list[torch.Tensor] = []  # per-forward (num, den) batch means, not yet in EMA
        self._init_host(gate=1.0, frozen=False, ema_count=0)

    @property
    def gate_value(self) -> float:
        """The gate g as a Python float (the buffer's float32 value), without a device read."""
        return self.host("gate")

    def set_gate(self, g: float) -> None:
        self.set_host("gate", g)

    def extra_repr(self) -> str:
        return f"{self.dim}, kind={self.kind}, eps={self.eps}"

    def normalize(self, h: torch.Tensor, gain: torch.Tensor | None = None) -> torch.Tensor:
        """The normalizing branch times `gain`: h / r(h) * gain (rms), (h - mu) / sigma * gain."""
        if self.kind == "rms":
            return F.rms_norm(h, (self.dim,), gain, self.eps)
        return F.layer_norm(h, (self.dim,), gain, None, self.eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # Branches on the host copy of g, computes with the buffer: no device read.
        g = self.host("gate")
        if g == 1.0:  # exactly the ordinary norm
            if self.training and not self.is_frozen:
                self._record_calibration_stats(h)
            out = self.normalize(h, self.weight)
            return out if self.bias is None else out + self.bias
        if self.kind == "layer":
            h = h - h.mean(-1, keepdim=True)  # both branches see the centred input (Eq. 6)
        out = h * ((1.0 - self.gate) * self.c * self.weight_tilde)  # linear branch
        if g > 0.0:  # normalizing branch, g folded into the gain: one fused kernel
            out = out + self.normalize(h, gain=self.gate * self.weight)
        return out if self.bias is None else out + self.bias

    # ---- calibration of c (Eq. 4 / Eq. 7) ----------------------------------------------------

    @torch.no_grad()
    def _record_calibration_stats(self, h: torch.Tensor) -> None:
        h = centred(h.detach().float(), self.kind)  # hbar for the layer kind: r(hbar) = sigma(h)
        scale = token_scale(h, "rms", self.eps)
        sq = (h * self.weight.detach().float()).pow(2).sum(-1)  # ||h * gamma||^2 per token
        self._pending.append(torch.stack([(sq / scale).mean(), sq.mean()]))

    @torch.no_grad()
    def update_calibration(self, mu: float, reduce: Reduce | None = None) -> None:
        """Fold this optimizer step's batch statistics into the EMAs and refresh c.

        s <- (1 - mu) s + mu x;  s_hat = s / (1 - (1 - mu)^n);  c = s_hat_num / (s_hat_den + delta).
        x is the mean over the step's micro-batches; `reduce` (a sum over data-parallel processes)
        makes it the mean over every process's micro-batches, so all hold the same c. Everything
        stays on the model's device (every process records the same number of forwards).
        """
        pending, self._pending = self._pending, []
        if self.is_frozen or not pending:
            return
        stats = torch.stack(pending).double()
        total = torch.cat([stats.sum(0), stats.new_full((1,), float(len(pending)))])
        correction = fold_ema_(self, (self.ema_num, self.ema_den), total, mu, reduce)
        self.c.copy_((self.ema_num / correction) / (self.ema_den / correction + self.delta))

    @torch.no_grad()
    def freeze(self) -> None:
        """Freeze c and copy gamma into gamma_tilde (done once, when g first drops below 1)."""
        if self.is_frozen:
            return
        if self.host("ema_count") == 0:
            raise RuntimeError(
                "TaperNorm.freeze: c was never calibrated (no training step ran at g=1); "
                "the taper must start after at least one optimizer step"
            )
        self.weight_tilde.copy_(self.weight)
        self.set_host(self.FROZEN_BUFFER, True)
        self._pending.clear()


class FixedScale(nn.Module):
    """A tapered norm at g = 0 as an explicit op: h * s (rms) or (h - mean(h)) * s + beta (layer)."""

    def __init__(self, dim: int, kind: str):
        super().__init__()
        self.kind = kind
        self.register_buffer("scale", torch.ones(dim))
        self.register_buffer("shift", torch.zeros(dim) if kind == "layer" else None)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.kind == "rms":
            return h * self.scale
        return torch.addcmul(self.shift, h - h.mean(-1, keepdim=True), self.scale)


def taper_norms(model: nn.Module) -> Iterator[tuple[str, TaperNorm]]:
    """(name, module) for every TaperNorm in a module tree."""
    for name, m in model.named_modules():
        if isinstance(m, TaperNorm):
            yield name, m


def set_gate(model: nn.Module, g: float) -> None:
    """Set the global gate g in [0, 1] of every TaperNorm in `model`."""
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"gate must be in [0, 1], got {g}")
    for _, m in taper_norms(model):
        m.set_gate(g)


def update_calibration(model: nn.Module, mu: float, reduce: Reduce | None = None) -> None:
    """Once per optimizer step while g = 1: fold recorded statistics into every TaperNorm's EMA
    (`reduce`: a sum over data-parallel processes, see TaperNorm.update_calibration)."""
    for _, m in taper_norms(model):
        m.update_calibration(mu, reduce)


def freeze(model: nn.Module) -> dict[str, torch.Tensor]:
    """At taper start: freeze every TaperNorm's c and set gamma_tilde := gamma; returns the
    calibrated c per layer (0-dim tensors on the model's device)."""
    out = {}
    for name, m in taper_norms(model):
        m.freeze()
        out[name] = m.c.detach().clone()  # a device tensor: read when the step's record is logged
    return out


start_taper = freeze  # the former name of `freeze` (exported by tapernorm before)


class RMSNorm(nn.Module):
    """h / sqrt(mean(h^2) + eps) * gamma (Eq. 2), torch's fused kernel."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class LayerNorm(nn.Module):
    """(h - mu) / sigma * gamma + beta (Eq. 1), torch's fused kernel."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class DyT(nn.Module):
    """Dynamic Tanh, weight * tanh(alpha * x) + bias: an elementwise stand-in for a norm, with a
    learnable scalar alpha (init alpha0) and per-feature weight (ones) and bias (zeros; none with
    bias=False, as in DyT's LLaMA recipe).

    From "Transformers without Normalization" (Zhu, Chen, He, LeCun, Liu 2025). alpha0 = 0.5 is that
    paper's default for non-LLM models; model.dyt_alpha0 gives its LLaMA values, which a GPT uses.
    No per-token statistic, but tanh is not linear, so DyT does not fold into a projection.
    """

    def __init__(self, dim: int, alpha0: float = 0.5, bias: bool = True):
        super().__init__()
        self.dim, self.alpha0 = dim, alpha0
        self.alpha = nn.Parameter(torch.tensor(float(alpha0)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def extra_repr(self) -> str:
        return f"{self.dim}, alpha0={self.alpha0}, bias={self.bias is not None}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bias is None:
            return torch.tanh(self.alpha * x) * self.weight
        return torch.addcmul(self.bias, torch.tanh(self.alpha * x), self.weight)


class FakeNorm(HostState):
    """LayerNorm (kind "layer") or RMSNorm ("rms") whose per-token scale becomes a fixed scalar s
    once frozen (FakeLN's removal of the norm, Baroni et al. 2025; schedule in fakeln.py):

        layer: (h - mean(h)) / s * gamma + beta        rms: h / s * gamma

    an affine map (still centering). s is the norm's "average std": a bias-corrected EMA (weight mu)
    of the batch-mean sigma(h) (r(h) for rms) over the optimizer steps before the freeze (fold_ema_).
    The buffer `removed` says it is frozen (is_frozen).
    """

    HOST_BUFFERS = {"removed": bool, "ema_count": int}
    FROZEN_BUFFER = "removed"  # the flag's name in state dicts, as checkpoints hold it

    def __init__(self, dim: int, kind: str = "layer", eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.dim, self.kind, self.eps = dim, kind, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias and kind == "layer" else None
        self.register_buffer("removed", torch.tensor(False))
        self.register_buffer("scale", torch.tensor(1.0))  # s, fixed at removal
        self.register_buffer("ema", torch.tensor(0.0))
        self.register_buffer("ema_count", torch.tensor(0, dtype=torch.long))
        self._pending: list[torch.Tensor] = []  # batch means of sigma(h), not yet in the EMA
        self._init_host(removed=False, ema_count=0)

    def extra_repr(self) -> str:
        return f"{self.dim}, kind={self.kind}, removed={self.is_frozen}"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if not self.is_frozen:
            if self.training:
                self._record(h)
            if self.kind == "rms":
                return F.rms_norm(h, (self.dim,), self.weight, self.eps)
            return F.layer_norm(h, (self.dim,), self.weight, self.bias, self.eps)
        if self.kind == "layer":
            h = h - h.mean(-1, keepdim=True)
        out = h * (self.weight / self.scale)
        return out if self.bias is None else out + self.bias

    @torch.no_grad()
    def _record(self, h: torch.Tensor) -> None:
        self._pending.append(token_scale(h.detach().float(), self.kind, self.eps).mean())

    @torch.no_grad()
    def update(self, mu: float, reduce: Reduce | None = None) -> None:
        """Fold this step's recorded batch means into the EMA (mean over micro-batches, and over
        data-parallel processes with `reduce`, a sum over them), on the model's device."""
        pending, self._pending = self._pending, []
        if self.is_frozen or not pending:
            return
        stats = torch.stack(pending).double()
        total = torch.stack([stats.sum(), stats.new_full((), float(len(pending)))])
        fold_ema_(self, (self.ema,), total, mu, reduce)

    @torch.no_grad()
    def freeze(self, mu: float) -> torch.Tensor:
        """Fix s to the EMA (weight `mu`), bias-corrected, and stop normalizing per token (remove
        the norm); returns s (a 0-dim tensor on the norm's device)."""
        if not self.is_frozen:
            count = self.host("ema_count")
            if count == 0:
                raise RuntimeError("FakeNorm.freeze: no step recorded its average scale yet")
            self.scale.copy_(self.ema.double() / bias_correction(mu, count))
            self.set_host(self.FROZEN_BUFFER, True)
        self._pending.clear()
        return self.scale.detach().clone()


# ---- the bias-corrected EMA of TaperNorm's c, FakeNorm's scale and the anchor's target ---------


def centred(h: torch.Tensor, kind: str) -> torch.Tensor:
    """h - mean(h) over the features for the layer kind (what LayerNorm normalizes), else h."""
    return h - h.mean(-1, keepdim=True) if kind == "layer" else h


def token_scale(h: torch.Tensor, kind: str, eps: float = 1e-5) -> torch.Tensor:
    """The per-token scale a norm divides by: r(h) = sqrt(mean(h^2) + eps) (rms), or
    sigma(h) = r(h - mean(h)) (layer). The one place r(h) is computed: TaperNorm's calibration,
    FakeNorm's average scale, the scale anchor and the diagnostics all call it."""
    return torch.sqrt(centred(h, kind).pow(2).mean(-1) + eps)


def ema_update_(ema: torch.Tensor, x: torch.Tensor, mu: float) -> None:
    """ema <- (1 - mu) ema + mu x, in place on ema's device; x a float64 0-dim tensor (mu x is
    rounded to ema's dtype before the add, as a Python scalar would be)."""
    ema.mul_(1 - mu).add_((mu * x).to(ema.dtype))


def bias_correction(mu: float, n: int) -> float:
    """1 - (1 - mu)^n: divides an EMA started at 0 after n updates into an unbiased mean."""
    return 1.0 - (1.0 - mu) ** n


@torch.no_grad()
def fold_ema_(
    owner: HostState,
    emas: tuple[torch.Tensor, ...],
    total: torch.Tensor,
    mu: float,
    reduce: Reduce | None = None,
) -> float:
    """One optimizer step of the bias-corrected EMA (TaperNorm's c, FakeNorm's s, ScaleAnchor's s_tgt).

    `total` (float64): this process's sum of each statistic over the step's micro-batches, then
    their count. `reduce` (a sum over data-parallel processes) makes the mean x the mean over every
    process's micro-batches. Each ema <- (1 - mu) ema + mu x (ema_update_), and owner's `ema_count`
    n grows by one. Returns the bias correction 1 - (1 - mu)^n: ema / it is the unbiased mean,

        s <- (1 - mu) s + mu x;  s_hat = s / (1 - (1 - mu)^n).
    """
    if reduce is not None:
        total = reduce(total)
    mean = total[:-1] / total[-1]
    for ema, x in zip(emas, mean, strict=True):
        ema_update_(ema, x, mu)
    count = owner.host("ema_count") + 1
    owner.set_host("ema_count", count)
    return bias_correction(mu, count)
