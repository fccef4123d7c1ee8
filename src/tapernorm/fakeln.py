"""FakeLN: removing the norms of a trained model by fine-tuning, one at a time (Baroni et al. 2025).

"Transformers Don't Need LayerNorm at Inference Time" (Baroni, Khara, Schoots, Heimersheim et al.
2025) fine-tunes GPT-2 while replacing each LayerNorm's per-token standard deviation by a fixed scalar,
norm after norm. A FakeNorm is the ordinary norm while live; from its removal step on

    layer: (h - mean(h)) / s * gamma + beta        rms: h / s * gamma

with s fixed: an affine map (still centering). s is the norm's "average std": a bias-corrected EMA
(weight mu) of the batch-mean sigma(h) (r(h) for rms) over the optimizer steps before the removal,

    e <- (1 - mu) e + mu x;  s = e / (1 - (1 - mu)^n)       (n = steps recorded),

one s per norm. Schedule: the 2L+1 norms go in the order ln_2 of blocks 0..L-1 (MLP), ln_1 of blocks
0..L-1 (attention), ln_f; removal i (0-based) happens at step start + ceil((i + 1) (end - start) /
(2L + 1)), so the window (start, end] is split evenly and every removal has >= `start` recorded steps.
Simplified from the original: one s per norm for all tokens and both attention paths (q/k and v).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .norms import HostState, Reduce, bias_correction, ema_update_

if TYPE_CHECKING:
    from .model import GPT


class FakeNorm(HostState):
    """LayerNorm (kind "layer") or RMSNorm ("rms") whose per-token scale becomes a fixed scalar once
    `remove()` is called."""

    HOST_BUFFERS = {"removed": bool, "ema_count": int}

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

    @property
    def is_removed(self) -> bool:
        return self.host("removed")

    def extra_repr(self) -> str:
        return f"{self.dim}, kind={self.kind}, removed={self.is_removed}"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if not self.is_removed:
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
        h = h.detach().float()
        if self.kind == "layer":
            h = h - h.mean(-1, keepdim=True)
        self._pending.append(torch.sqrt(h.pow(2).mean(-1) + self.eps).mean())

    @torch.no_grad()
    def update(self, mu: float, reduce: Reduce | None = None) -> None:
        """Fold this step's recorded batch means into the EMA (mean over micro-batches, and over
        data-parallel processes with `reduce`, a sum over them), on the model's device."""
        pending, self._pending = self._pending, []
        if self.is_removed or not pending:
            return
        stats = torch.stack(pending).double()
        total = torch.stack([stats.sum(), stats.new_full((), float(len(pending)))])
        if reduce is not None:
            total = reduce(total)
        ema_update_(self.ema, total[0] / total[1], mu)
        self.set_host("ema_count", self.host("ema_count") + 1)

    @torch.no_grad()
    def remove(self, mu: float) -> torch.Tensor:
        """Fix s to the EMA (weight `mu`), bias-corrected, and stop normalizing per token; returns s
        (a 0-dim tensor on the norm's device)."""
        if not self.is_removed:
            count = self.host("ema_count")
            if count == 0:
                raise RuntimeError("FakeNorm.remove: no step recorded its average scale yet")
            self.scale.copy_(self.ema.double() / bias_correction(mu, count))
            self.set_host("removed", True)
        self._pending.clear()
        return self.scale.detach().clone()


def removal_order(n_layer: int) -> list[str]:
    """Module names of the norms in removal order: MLP norms, attention norms, the final norm."""
    mlp = [f"blocks.{i}.ln_2" for i in range(n_layer)]
    attn = [f"blocks.{i}.ln_1" for i in range(n_layer)]
    return [*mlp, *attn, "ln_f"]


def removal_steps(n_layer: int, start: int, end: int) -> dict[str, int]:
    """Norm name -> the first optimizer step (1-based) that runs it with its fixed scale."""
    if not 1 <= start < end:
        raise ValueError(f"FakeLN removal window needs 1 <= start < end, got {start}, {end}")
    names = removal_order(n_layer)
    n = len(names)
    return {name: start - (-(i + 1) * (end - start) // n) for i, name in enumerate(names)}


def fake_norms(model: nn.Module) -> dict[str, FakeNorm]:
    return {name: m for name, m in model.named_modules() if isinstance(m, FakeNorm)}


class FakeLNSchedule:
    """Drives a norm="fakeln" model's removals in the training loop: `before_step(k)` removes the
    norms due at step k, `after_step()` folds the step's statistics into the live norms' EMAs."""

    def __init__(self, model: GPT, start: int, end: int, mu: float):
        self.norms = fake_norms(model)
        self.steps = removal_steps(model.config.n_layer, start, end)
        if set(self.norms) != set(self.steps):
            raise ValueError("FakeLNSchedule: the model's FakeNorms are not its 2L+1 norms")
        self.mu = mu

    def before_step(self, k: int) -> dict:
        """Remove every live norm due at or before step k; {"fakeln_removed": {name: s}} or {}
        (s a 0-dim device tensor, read when the step's record is written)."""
        due = [n for n, step in self.steps.items() if step <= k and not self.norms[n].is_removed]
        return {"fakeln_removed": {n: self.norms[n].remove(self.mu) for n in due}} if due else {}

    def after_step(self, reduce: Reduce | None = None) -> None:
        for norm in self.norms.values():
            norm.update(self.mu, reduce)


def schedule_for(cfg: dict, model: GPT) -> FakeLNSchedule | None:
    """The FakeLN schedule of a resolved run config (its `fakeln` keys), or None for other models."""
    if model.config.norm != "fakeln":
        return None
    f = cfg["fakeln"]
    return FakeLNSchedule(model, f["start"], f["end"], f["ema_mu"])
