"""How often runs blow up, exactly (no scipy): a binomial rate's Clopper-Pearson interval, the
two-sided Fisher exact test of two rates, and an exact conditional test of whether the blow-ups of
a crossed grid (init seeds x data-order seeds) gather along one of its axes.

- clopper_pearson(k, n): the exact 95% interval of k/n: its ends are the p where the binomial tail
  P(X >= k | p) (lower end) or P(X <= k | p) (upper end) equals 2.5%, found by bisection on the
  binomial CDF (each end 0 or 1 where k is 0 or n).
- fisher_exact(a, b, c, d): the two-sided p of the 2x2 table [[a, b], [c, d]] with its margins
  fixed: the sum of the hypergeometric probabilities of the tables no more probable than the one
  observed (within a relative tolerance of 1e-7, as the usual implementations take it), computed
  in integers.
- axis_test(cells, axis): given which cells of a grid blew up, whether they gather along `axis`
  (the grid's columns or rows) more than chance would: the statistic is sum_j c_j^2 / n_j over
  the groups j of the axis (c_j blow-ups among its n_j runs; the chi-square statistic up to
  constants, with k = sum c_j fixed), and its exact distribution when every set of k cells of the
  grid is equally likely (the multivariate hypergeometric law of the group counts). Several grids
  (arms) combine by adding their statistics, each arm's blow-ups placed at random in its own grid
  (pooled_axis_test).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import product

LEVEL = 0.95  # the intervals' coverage
FISHER_RTOL = 10**7  # 1 / the relative tolerance of "no more probable than the observed table"


def _check_counts(k: int, n: int) -> None:
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a rate needs 0 <= k <= n and n >= 1, got {k}/{n}")


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p) (terms in log space: no overflow for large n)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    lg = math.lgamma
    total = sum(
        math.exp(lg(n + 1) - lg(i + 1) - lg(n - i + 1) + i * lp + (n - i) * lq)
        for i in range(k + 1)
    )
    return min(1.0, total)


def _bisect(f, target: float, increasing: bool) -> float:
    """The p in [0, 1] where the monotone f(p) crosses `target`."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return 0.5 * (lo + hi)


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) `level` interval of the rate k/n."""
    _check_counts(k, n)
    tail = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else _bisect(lambda p: 1.0 - binom_cdf(k - 1, n, p), tail, True)
    hi = 1.0 if k == n else _bisect(lambda p: binom_cdf(k, n, p), tail, False)
    return lo, hi


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """The two-sided Fisher exact p of the 2x2 table [[a, b], [c, d]] (module docstring)."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"a 2x2 table of counts, got {[[a, b], [c, d]]}")
    row1, row2, col1 = a + b, c + d, a + c
    if row1 == 0 or row2 == 0 or col1 == 0 or col1 == row1 + row2:
        return 1.0  # a margin is empty: every table with these margins is the observed one
    weights = [
        math.comb(row1, x) * math.comb(row2, col1 - x)
        for x in range(max(0, col1 - row2), min(row1, col1) + 1)
    ]
    observed = math.comb(row1, a) * math.comb(row2, c)
    extreme = sum(w for w in weights if w * FISHER_RTOL <= observed * (FISHER_RTOL + 1))
    return min(1.0, float(Fraction(extreme, sum(weights))))


# ---- blow-ups along an axis of a crossed grid -------------------------------------------------------


@dataclass(frozen=True)
class AxisTest:
    """Whether the blow-ups of a grid gather along one axis: the blow-ups per group (`counts`,
    of `sizes` runs each), the exact p of a statistic at least as large as the one observed, and
    the smallest p the grid could give with this many blow-ups (all gathered as far as they can
    be): a p above `min_p` is all the grid can say, and a `min_p` above 0.05 means it cannot
    tell at that level whatever the blow-ups' placement."""

    counts: dict
    sizes: dict
    p: float
    min_p: float


def _distribution(sizes: Sequence[int], k: int) -> dict[Fraction, Fraction]:
    """The exact law of sum_j c_j^2 / n_j when k of the sum(sizes) cells, chosen uniformly,
    blow up (c_j: how many of group j's n_j cells)."""
    total = math.comb(sum(sizes), k)
    law: dict[Fraction, Fraction] = {}
    for counts in product(*(range(n + 1) for n in sizes)):
        if sum(counts) != k:
            continue
        ways = math.prod(math.comb(n, c) for n, c in zip(sizes, counts, strict=True))
        stat = sum((Fraction(c * c, n) for n, c in zip(sizes, counts, strict=True)), Fraction(0))
        law[stat] = law.get(stat, Fraction(0)) + Fraction(ways, total)
    return law


def _convolve(a: dict[Fraction, Fraction], b: dict[Fraction, Fraction]) -> dict:
    out: dict[Fraction, Fraction] = {}
    for x, px in a.items():
        for y, py in b.items():
            out[x + y] = out.get(x + y, Fraction(0)) + px * py
    return out


def _groups(cells: Mapping[tuple[Hashable, Hashable], bool], axis: int) -> tuple[dict, dict]:
    """(blow-ups per group, runs per group) of the grid's `axis` (0: rows, 1: columns)."""
    counts: dict = {}
    sizes: dict = {}
    for key, blew in cells.items():
        group = key[axis]
        sizes[group] = sizes.get(group, 0) + 1
        counts[group] = counts.get(group, 0) + int(bool(blew))
    return counts, sizes


def _statistic(counts: dict, sizes: dict) -> Fraction:
    return sum((Fraction(counts[g] ** 2, sizes[g]) for g in sizes), Fraction(0))


def _tail(law: dict[Fraction, Fraction], at: Fraction) -> float:
    return float(sum((p for x, p in law.items() if x >= at), Fraction(0)))


def pooled_axis_test(grids: Sequence[Mapping[tuple, bool]], axis: int) -> AxisTest:
    """axis_test over several grids at once (each its own blow-ups, placed at random in its own
    grid): the statistics add; `counts` and `sizes` are summed over the grids."""
    if not grids:
        raise ValueError("no grid to test")
    law: dict[Fraction, Fraction] = {Fraction(0): Fraction(1)}
    observed = largest = Fraction(0)
    counts: dict = {}
    sizes: dict = {}
    for cells in grids:
        c, n = _groups(cells, axis)
        groups = sorted(n, key=str)
        one = _distribution([n[g] for g in groups], sum(c.values()))
        law = _convolve(law, one)
        observed += _statistic(c, n)
        largest += max(one)
        for g in groups:
            counts[g] = counts.get(g, 0) + c[g]
            sizes[g] = sizes.get(g, 0) + n[g]
    return AxisTest(counts, sizes, _tail(law, observed), _tail(law, largest))


def axis_test(cells: Mapping[tuple, bool], axis: int) -> AxisTest:
    """Whether the blow-ups of one grid ({(row, column): blew up}) gather along `axis` (0: by
    row, 1: by column) beyond chance (module docstring)."""
    return pooled_axis_test([cells], axis)
