"""The statistics of a battery's per-window numbers: mean, quantiles, max and the tail fraction.

A NaN counts as +inf (a window whose loss is not a number is as bad as one whose loss overflowed),
and both are counted under `non_finite`. Quantiles interpolate linearly between the two nearest
order statistics, as numpy's default does; one whose upper neighbour is infinite is infinite.
"""

from __future__ import annotations

import math

import numpy as np
import torch

QUANTILES = {"p50": 0.5, "p99": 0.99, "p99_9": 0.999}
TAIL_FACTOR = 2.0  # a window is in the tail above TAIL_FACTOR x the clean median


def as_array(values: torch.Tensor | np.ndarray | list[float]) -> np.ndarray:
    """The values as a sorted float64 array, NaN replaced by +inf."""
    if isinstance(values, torch.Tensor):
        values = values.detach().double().cpu().numpy()
    v = np.asarray(values, dtype=np.float64).copy()
    v[np.isnan(v)] = np.inf
    return np.sort(v)


def quantile(sorted_values: np.ndarray, q: float) -> float:
    """The q-quantile of sorted values (linear interpolation; infinite if its upper neighbour is)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    if lo == hi or a == b:
        return a
    if math.isinf(b):
        return math.inf
    return a + (b - a) * (pos - lo)


def median(values: torch.Tensor | np.ndarray | list[float]) -> float:
    return quantile(as_array(values), 0.5)


def summary(values: torch.Tensor | np.ndarray | list[float], clean_median: float) -> dict:
    """{n, mean, p50, p99, p99_9, max, above_2x_median, non_finite} of per-window values;
    `above_2x_median` is the fraction of windows above TAIL_FACTOR x `clean_median`."""
    v = as_array(values)
    if len(v) == 0:
        raise ValueError("a battery group holds no windows")
    finite = np.isfinite(v)
    out = {"n": len(v), "mean": float(v.mean()) if finite.all() else math.inf}
    out.update({name: quantile(v, q) for name, q in QUANTILES.items()})
    out["max"] = float(v[-1])
    out["above_2x_median"] = float((v > TAIL_FACTOR * clean_median).mean())
    out["non_finite"] = int((~finite).sum())
    return out
