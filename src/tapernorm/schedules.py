"""Learning-rate and gate schedules, as functions of the 1-based optimizer step k."""

from __future__ import annotations

import math


def lr_at(k: int, peak: float, warmup: int, total: int, min_lr: float = 0.0) -> float:
    """Linear warmup to `peak` over `warmup` steps, then cosine decay to `min_lr` at step `total`."""
    if k <= warmup:
        return peak * k / max(warmup, 1)
    progress = min(1.0, (k - warmup) / max(total - warmup, 1))
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * progress))


def gate_at(k: int, start: int, end: int) -> float:
    """g = 1 up to `start`, g(k) = 0.5 (1 + cos(pi (k - start) / (end - start))) on [start, end], 0 after."""
    if k <= start:
        return 1.0
    if k >= end:
        return 0.0
    return 0.5 * (1.0 + math.cos(math.pi * (k - start) / (end - start)))
