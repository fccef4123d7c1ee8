"""The numbers behind each claims row, machine-readable beside its prose (results/claims.json).

A claim that measures something attaches `Numbers` to its row (`with_numbers`), built from the same
values its prose and verdict are computed from: the headline estimate with its interval (and what
that interval is), the unit, the seeds, and the parts it combines (per width, source, benchmark
cell or arm). Its criterion (`Criterion`: the text, its bounds where numeric, its grading) is a
constant of the claim's module. `record_fields` turns a row into the JSON fields of its claims.json entry;
a row without numbers (not measured, not judged) has them null and says why in `no_estimate`.
Fields are documented in docs/usage.md ("claims.json").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

PAIRED_GAP = "paired_gap"  # a part's kind: a validation-loss gap paired by seed, in %
NUMBERS = "numbers"  # the row's key that holds its Numbers (not a column of claims.md)
FIELDS = (
    "headline", "estimate", "ci_low", "ci_high", "interval", "unit", "n_seeds", "criterion",
    "verdict", "no_estimate", "parts",
)  # fmt: skip


@dataclass(frozen=True)
class Criterion:
    """The paper's criterion as the claim judges it: its text (claims.json's, one line), its bounds
    where numeric (a headline estimate inside [low, high] meets it; None: unbounded on that side)
    and its grading in full (how the parts are judged and combined, as claims.md's comment states
    it; the one place it is written)."""

    text: str
    low: float | None = None
    high: float | None = None
    grading: str = ""

    def to_dict(self) -> dict:
        """claims.json's `criterion`: the text and bounds (the grading is in the comment)."""
        return {"text": self.text, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Part:
    """One measured part of a claim (a width, a source, a benchmark cell, an arm)."""

    label: str
    estimate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n_seeds: int | None = None
    kind: str | None = None  # PAIRED_GAP for a gap paired by seed (the forest plot draws those)
    variant: str | None = None  # the variant measured, where one is


@dataclass(frozen=True)
class Numbers:
    """A row's headline number (`headline`: as the README quotes it) and its parts. `interval`
    names what [ci_low, ci_high] is; `no_estimate` says why `estimate` is None where it is."""

    headline: str
    unit: str | None
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    interval: str | None = None
    n_seeds: int | None = None
    no_estimate: str | None = None
    parts: tuple[Part, ...] = ()


def with_numbers(row: dict, numbers: Numbers) -> dict:
    return {**row, NUMBERS: numbers}


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def record_fields(row: dict, criterion: Criterion | None) -> dict:
    """The machine-readable fields of a row's claims.json entry (FIELDS). Non-finite numbers
    (a diverged cell's infinite gap) are null; `no_estimate` then says so."""
    numbers: Numbers | None = row.get(NUMBERS)
    if numbers is None:
        why = row["Holds?"] + (f": {row['Comment']}" if row.get("Comment") else "")
        numbers = Numbers(headline=row["Ours"], unit=None, no_estimate=why)
    estimate = _finite(numbers.estimate)
    no_estimate = numbers.no_estimate
    if estimate is None and no_estimate is None:
        no_estimate = "not finite (every run of a compared cell diverged)"
    parts = [
        {**asdict(p), **{k: _finite(getattr(p, k)) for k in ("estimate", "ci_low", "ci_high")}}
        for p in numbers.parts
    ]
    return {
        "headline": numbers.headline,
        "estimate": estimate,
        "ci_low": _finite(numbers.ci_low),
        "ci_high": _finite(numbers.ci_high),
        "interval": numbers.interval,
        "unit": numbers.unit,
        "n_seeds": numbers.n_seeds,
        "criterion": criterion.to_dict() if criterion else None,
        "verdict": row["Holds?"],
        "no_estimate": no_estimate,
        "parts": parts,
    }
