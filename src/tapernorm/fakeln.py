"""FakeLN's schedule: removing the norms of a trained model by fine-tuning, one at a time (Baroni et al.
2025); the norm layer itself, FakeNorm, is in norms.py.

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

from torch import nn

from .norms import FakeNorm, Reduce

if TYPE_CHECKING:
    from .model import GPT


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
        due = [n for n, step in self.steps.items() if step <= k and not self.norms[n].is_frozen]
        return {"fakeln_removed": {n: self.norms[n].freeze(self.mu) for n in due}} if due else {}

    def after_step(self, reduce: Reduce | None = None) -> None:
        for norm in self.norms.values():
            norm.update(self.mu, reduce)
