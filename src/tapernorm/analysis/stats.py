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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..variants import VARIANTS
from .runs import blown_up, blowup_text, variant_order

VARIANT_LABELS = {name: spec["label"] for name, spec in VARIANTS.items()}

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


# ---- gaps paired by seed ------------------------------------------------------------------------------
# Seed s of every variant draws the same initialisation stream and the same batches (tapernorm.training.loop:
# torch.manual_seed(seed) before the model is built, batch_generator(seed, step, micro); a test checks
# both), so variant and baseline at one seed differ only in the norms: their gap is a paired
# measurement, and the spread of the per-seed gaps is what an interval rests on.

# Student t quantiles t_{0.975}(df), df = 1..30 (standard tables, 3 decimals); beyond, the
# Cornish-Fisher expansion around the normal quantile (error < 1e-4 for df > 30).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)  # fmt: skip
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean of `values` and its 95% t interval (mean, low, high; of log ratios: on the log scale);
    NaN bounds with fewer than 2 values."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean()) if len(x) else math.nan
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = t975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class PairedGap:
    """A variant's validation-loss gap to its baseline, paired by seed: per seed 100 (v_s / b_s - 1)
    over the seeds both kept (Table 2's exclusions apply to each side), their mean and its 95% t
    interval (NaN with fewer than two pairs)."""

    variant: str
    against: str
    width: int
    per_seed: dict[int, float]
    mean: float
    lo: float
    hi: float
    left_out: tuple[str, ...] = ()  # "seed 2 (Internal-Taper (+aux) diverged)", ...

    @property
    def n(self) -> int:
        return len(self.per_seed)

    def interval(self) -> str:
        """'[+0.40%, +1.86%]', or 'no interval (1 pair)'."""
        if not math.isfinite(self.lo):
            return f"no interval ({self.n} pair{'s' if self.n != 1 else ''})"
        return f"[{self.lo:+.2f}%, {self.hi:+.2f}%]"

    def seeds_text(self) -> str:
        """'per seed +0.91, +1.36, +1.11' (in seed order)."""
        return "per seed " + ", ".join(f"{g:+.2f}" for _, g in sorted(self.per_seed.items()))

    def text(self) -> str:
        """'+1.13% [+0.40%, +1.86%] (3 seed pairs)'."""
        if not self.n:
            return "no seed pair"
        return f"{self.mean:+.2f}% {self.interval()} ({self.n} seed pair{'s' * (self.n != 1)})"


# what a pair shares besides its unit (the seed), where the run table has it: the data order, and
# compiled or eager training (the scaling study's cells may hold a compiled and an eager run of one
# seed: two pairs of one unit, whose gaps are averaged)
PAIR_COLUMNS = ("data_seed", "compiled")


def _unit_text(unit: tuple, names: tuple[str, ...]) -> str:
    """'seed 2', or 'init 1, data 2' where pairs are units of init and data-order seeds."""
    if names == ("seed",):
        return f"seed {unit[0]}"
    words = {"seed": "init", "data_seed": "data"}
    return ", ".join(f"{words.get(n, n)} {v}" for n, v in zip(names, unit, strict=True))


def _key(run: dict, keys: list[str]) -> tuple:
    """A run's pair key: its values of `keys`, as plain Python numbers."""
    return tuple(run[k].item() if hasattr(run[k], "item") else run[k] for k in keys)


def _why_dropped(
    cell: pd.DataFrame, clean: bool, outliers: bool, last_weights: bool = False
) -> dict[str, str]:
    """run name -> why a gap leaves it out: 'diverged', 'blew up: ...' (with `clean`: a finite
    spike too), 'an outlier' (Table 2's rule among the runs trained alike, where `outliers`); with
    `last_weights` only 'has no finite validation loss'."""
    if last_weights:
        bad = ~np.isfinite(cell["val_loss"].astype(float))
        return {name: "has no finite validation loss" for name in cell.loc[bad, "name"]}
    why: dict[str, str] = {}
    if clean and len(cell):
        spiked = blown_up(cell) & ~cell["diverged"].astype(bool)
        why |= {r["name"]: f"blew up: {blowup_text(r)}" for r in cell[spiked].to_dict("records")}
    rest = cell[~cell["name"].isin(list(why))]
    modes = [rest] if "compiled" not in rest.columns else [g for _, g in rest.groupby("compiled")]
    for group in modes:
        st = cell_stats(group)
        why |= {name: "diverged" for name in st.diverged}
        if outliers:
            why |= {name: "an outlier" for name in st.outliers}
    return why


def paired_gap(
    runs: pd.DataFrame,
    width: int,
    variant: str,
    against: str,
    clean: bool = False,
    unit: tuple[str, ...] = ("seed",),
    outliers: bool = True,
    last_weights: bool = False,
) -> PairedGap:
    """`variant`'s gap to `against` at `width`, paired by seed (PairedGap).

    A pair is a run of each arm with the same `unit` (the seed; the init and data-order seeds of a
    crossed study) and the same PAIR_COLUMNS where the table has them; a unit with several pairs
    (a compiled and an eager run of one seed) gets their mean gap. Left out, and named: diverged
    runs; with `clean` every run that blew up (runs.blown_up); where `outliers` Table 2's
    outliers. With `last_weights` (last_weights_gap) only runs without a finite validation loss."""
    at = runs[runs["width"] == width]
    keys = list(unit) + [c for c in PAIR_COLUMNS if c in at.columns and c not in unit]
    arms = {}  # arm -> (pair key -> run names, why each is left out)
    for v in (variant, against):
        cell = at[at["variant"] == v]
        names: dict[tuple, list[str]] = {}
        for r in cell.to_dict("records"):
            names.setdefault(_key(r, keys), []).append(r["name"])
        arms[v] = (cell, names, _why_dropped(cell, clean, outliers, last_weights))

    def kept(v: str) -> dict[tuple, float]:
        cell, _, why = arms[v]
        rows = cell[~cell["name"].isin(list(why))]
        return {_key(r, keys): float(r["val_loss"]) for r in rows.to_dict("records")}

    kept_v, kept_b = kept(variant), kept(against)
    pairs: dict[tuple, list[float]] = {}
    for key in sorted(kept_v):
        if key in kept_b:
            pairs.setdefault(key[: len(unit)], []).append(gap_pct(kept_v[key], kept_b[key]))
    per_unit = {(u[0] if len(unit) == 1 else u): float(np.mean(g)) for u, g in pairs.items()}
    both = pd.concat([arms[variant][0], arms[against][0]])
    several = "compiled" in keys and both["compiled"].nunique() > 1  # compiled and eager runs
    left_out = []
    for key in sorted(set(arms[variant][1]) | set(arms[against][1])):
        if key in kept_v and key in kept_b:
            continue
        label = _unit_text(key[: len(unit)], tuple(unit))
        if several:
            label += ", compiled" if key[keys.index("compiled")] else ", eager"
        for v in (variant, against):
            _, names, why = arms[v]
            if key not in names:
                left_out.append(f"{label} (no {VARIANT_LABELS.get(v, v)} run)")
            left_out += [
                f"{label} ({VARIANT_LABELS.get(v, v)} {why[n]})"
                for n in names.get(key, ())
                if n in why
            ]
    return gap_of(per_unit, variant, against, width, tuple(left_out))


def gap_of(
    per_unit: dict, variant: str, against: str, width: int, left_out: tuple[str, ...] = ()
) -> PairedGap:
    """The PairedGap of per-unit gaps (%): their mean and 95% t interval (NaN with < 2)."""
    mean, lo, hi = t_interval(list(per_unit.values()))
    return PairedGap(variant, against, int(width), dict(per_unit), mean, lo, hi, tuple(left_out))


def last_weights_gap(
    runs: pd.DataFrame, width: int, variant: str, against: str, unit: tuple[str, ...] = ("seed",)
) -> PairedGap:
    """The gap over every pair, runs that blew up or diverged included at the validation loss of
    the weights they kept (eval.json's: a diverged run's last checkpoint before its divergence),
    no outlier rule. A run without a finite validation loss cannot enter: its pair is left out and
    named ('has no finite validation loss'), never dropped silently."""
    return paired_gap(runs, width, variant, against, unit=unit, outliers=False, last_weights=True)
