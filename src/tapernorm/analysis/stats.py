"""Mean ± std over seeds with the outlier rule of Table 2, and relative gaps.

Outlier rule (applied by code, stated in Table 2's caption):
1. Diverged runs (eval.json diverged, or a non-finite validation loss) are always excluded.
2. Among the finite runs, if there are at least MIN_SEEDS_FOR_OUTLIERS (4), a run whose robust z-score
   |x - median| / (1.4826 * MAD) exceeds ROBUST_Z_MAX (3.5) is excluded (MAD = median |x - median|).
   The rule is applied once, not iterated; when MAD is 0 the scale is undefined and nothing is excluded.
Any exclusion marks the cell with a dagger, as the paper marks its excluded seed. std is the sample
standard deviation (ddof=1) of the runs kept; it is undefined (NaN) for a single run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .runs import variant_order

MIN_SEEDS_FOR_OUTLIERS = 4
ROBUST_Z_MAX = 3.5
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this = its standard deviation

RULE_TEXT = (
    "Mean ± std (ddof=1) over seeds. † marks a cell with excluded runs: diverged runs are always "
    f"excluded; among finite runs, with at least {MIN_SEEDS_FOR_OUTLIERS} seeds, a run with robust "
    f"z-score |x - median| / ({MAD_TO_SIGMA} MAD) > {ROBUST_Z_MAX} is excluded as an outlier."
)


@dataclass
class CellStats:
    """Validation-loss statistics of one (width, variant) cell."""

    mean: float
    std: float
    n_total: int
    n_used: int
    diverged: list[str] = field(default_factory=list)  # run names
    outliers: list[str] = field(default_factory=list)

    @property
    def dagger(self) -> bool:
        return bool(self.diverged or self.outliers)

    @property
    def all_diverged(self) -> bool:
        return self.n_total > 0 and len(self.diverged) == self.n_total


def robust_z(values: np.ndarray) -> np.ndarray:
    """|x - median| / (1.4826 MAD); zeros when MAD is 0 (the scale is undefined)."""
    median = np.median(values)
    mad = np.median(np.abs(values - median))
    if mad == 0:
        return np.zeros_like(values, dtype=float)
    return np.abs(values - median) / (MAD_TO_SIGMA * mad)


def cell_stats(cell: pd.DataFrame) -> CellStats:
    """Stats of the runs in `cell` (columns name, val_loss, diverged) under the outlier rule."""
    bad = cell["diverged"].astype(bool) | ~np.isfinite(cell["val_loss"].astype(float))
    diverged = cell.loc[bad, "name"].tolist()
    finite = cell.loc[~bad]
    keep = np.ones(len(finite), dtype=bool)
    if len(finite) >= MIN_SEEDS_FOR_OUTLIERS:
        keep = robust_z(finite["val_loss"].to_numpy(dtype=float)) <= ROBUST_Z_MAX
    used = finite["val_loss"].to_numpy(dtype=float)[keep]
    return CellStats(
        mean=float(used.mean()) if len(used) else math.nan,
        std=float(used.std(ddof=1)) if len(used) > 1 else math.nan,
        n_total=len(cell),
        n_used=int(keep.sum()),
        diverged=diverged,
        outliers=finite.loc[~keep, "name"].tolist(),
    )


def gap_pct(value: float, reference: float) -> float:
    """Relative gap in percent: 100 (value / reference - 1)."""
    return 100.0 * (value / reference - 1.0)


def fmt_cell(stats: CellStats, gap: float | None = None) -> str:
    """'2.1852 ± 0.0040 † (+1.46%) (5/6 seeds; 1 diverged)' in the style of the paper's Table 2."""
    if stats.all_diverged:
        return f"diverged ({stats.n_total}/{stats.n_total})"
    std = f"{stats.std:.4f}" if math.isfinite(stats.std) else "n/a"
    text = f"{stats.mean:.4f} ± {std}"
    if stats.dagger:
        text += " †"
    if gap is not None and math.isfinite(gap):
        text += f" ({gap:+.2f}%)"
    if stats.dagger:
        why = []
        if stats.diverged:
            why.append(f"{len(stats.diverged)} diverged")
        if stats.outliers:
            why.append(f"{len(stats.outliers)} outlier" + ("s" if len(stats.outliers) > 1 else ""))
        text += f" ({stats.n_used}/{stats.n_total} seeds; {', '.join(why)})"
    return text


def stats_by_cell(runs: pd.DataFrame) -> dict[tuple[int, str], CellStats]:
    """CellStats of every (width, variant) with a Table 1 variant, in width then Table 1 order."""
    runs = runs[runs["variant"].notna()]
    out = {}
    for width in sorted(runs["width"].unique()):
        at_width = runs[runs["width"] == width]
        for variant in variant_order(at_width["variant"]):
            out[(int(width), variant)] = cell_stats(at_width[at_width["variant"] == variant])
    return out


def gradient_ratios(g: pd.Series | pd.DataFrame) -> tuple:
    """Claim 5's two ratios of end gradient norms `g` indexed by variant (a Series of one weight
    type, or a frame with a column per variant: then per row):
    no-final-norm over final-norm runs, (Final + All) / (Baseline + Internal), and All-Taper (+aux)
    over Internal-Taper (+aux)."""
    return (g["final"] + g["all"]) / (g["baseline"] + g["internal"]), g["all_aux"] / g[
        "internal_aux"
    ]
