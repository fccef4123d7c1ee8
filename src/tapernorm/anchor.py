"""The fixed-target scale loss (paper Eq. 5): an explicit anchor for the pre-logit scale.

    eq5:      L_aux = lambda * mean_{b,t} (s(h_bt) - s_tgt)^2            (the paper)
    relative: L_aux = lambda * mean_{b,t} (s(h_bt) / s_tgt - 1)^2        (our extension)

s = r(h) (rms models) or sigma(h) (layer models). s_tgt is a bias-corrected EMA of the batch-mean s
over the training steps at g = 1, frozen when the taper starts; the loss is active from then on. Its
gradient is a restoring force along h (Prop. 4.3): <grad, h> = 2 lambda (s - s_tgt) ||h||^2 / (d s)
for eq5, whose stiffness therefore grows like s_tgt^2 (a small residual stream is held loosely), and
2 lambda (s / s_tgt - 1) ||h||^2 / (d s s_tgt) for the relative form, which is unchanged when h and
s_tgt are scaled together: one lambda means the same stiffness at every width and scale.
"""

from __future__ import annotations

import torch

from .norms import Reduce, fold_ema_, token_scale
from .runtime.host_state import HostState

ANCHOR_FORMS = ("eq5", "relative")


class ScaleAnchor(HostState):
    """Tracks s_tgt while g = 1 and gives the scale loss of `form` (eq5 or relative) once frozen."""

    HOST_BUFFERS = {"frozen": bool, "ema_count": int}

    def __init__(self, kind: str = "rms", lam: float = 0.1, eps: float = 1e-5, form: str = "eq5"):
        super().__init__()
        if form not in ANCHOR_FORMS:
            raise ValueError(f"ScaleAnchor form must be one of {ANCHOR_FORMS}, got {form!r}")
        self.kind, self.lam, self.eps, self.form = kind, lam, eps, form
        self.register_buffer("ema", torch.tensor(0.0))
        self.register_buffer("ema_count", torch.tensor(0, dtype=torch.long))
        self.register_buffer("target", torch.tensor(float("nan")))
        self.register_buffer("frozen", torch.tensor(False))
        self._pending: list[torch.Tensor] = []  # batch means of s, not yet in the EMA
        self._init_host(frozen=False, ema_count=0)

    def loss(self, h: torch.Tensor) -> torch.Tensor:
        """The scale loss of the pre-logit states h (B, T, d); records s for the EMA until frozen."""
        s = token_scale(h.float(), self.kind, self.eps)
        if not self.is_frozen:
            self._pending.append(s.detach().mean())
            return h.new_zeros((), dtype=torch.float32)
        if self.form == "relative":
            return self.lam * (s / self.target - 1.0).pow(2).mean()
        return self.lam * (s - self.target).pow(2).mean()

    @torch.no_grad()
    def update(self, mu: float, reduce: Reduce | None = None) -> None:
        """Once per optimizer step at g = 1: s <- (1 - mu) s + mu * mean(batch s), on the device.

        `reduce` (a sum over data-parallel processes) takes the mean over every process's batches.
        """
        pending, self._pending = self._pending, []
        if self.is_frozen or not pending:
            return
        total = pending[0].double()
        for s in pending[1:]:  # in order, as a Python sum of the batch means would add them
            total = total + s.double()
        total = torch.stack([total, total.new_full((), float(len(pending)))])
        correction = fold_ema_(self, (self.ema,), total, mu, reduce)
        self.target.copy_(self.ema / correction)

    @torch.no_grad()
    def freeze(self) -> torch.Tensor:
        """Freeze s_tgt at taper start; returns it (a 0-dim tensor on the anchor's device)."""
        if self.host("ema_count") == 0:
            raise RuntimeError(
                "ScaleAnchor.freeze: no step at g=1 was recorded, s_tgt is undefined"
            )
        self.set_host(self.FROZEN_BUFFER, True)
        return self.target.detach().clone()
