"""The claims row "TaperNorm vs DyT": two ways to a transformer without per-token normalization at
inference, side by side (DyT: "Transformers without Normalization", Zhu et al. 2025; not in the paper).

Criterion (fixed here, stated in the row): at every width with Baseline, Internal-Taper (+aux) and DyT
runs, TaperNorm's validation-loss gap to the baseline is <= DyT's (a DyT cell whose seeds all diverged
counts as an infinite gap), and in every benchmark measured with DyT rows (forward; decode per mode) the
folded model's median speedup over the baseline is >= DyT's. yes if both hold everywhere, no if
neither holds anywhere, else partly; without DyT benchmark rows, at most partly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import pandas as pd

from . import benchmarks
from .claim_rows import ClaimInputs, claim_row, not_measured
from .runs import describe_scale
from .stats import gap_pct, stats_by_cell

TAPER = "internal_aux"  # the TaperNorm variant compared: internal norms folded, final norm kept
CLAIM = "TaperNorm vs DyT: Internal-Taper (+aux) as close to the baseline's loss, and faster folded"
PAPER = "— (DyT is not in the paper; our comparison)"


def without_dyt(claim: Callable[[ClaimInputs], dict]) -> Callable[[ClaimInputs], dict]:
    """`claim` judged on the paper's variants only: DyT runs have no norm to keep or taper, so they
    belong to neither side of the paper's final-norm comparisons (claims 3-5)."""

    @functools.wraps(claim)
    def judged(inp: ClaimInputs) -> dict:
        drop = {}
        for name in ("runs", "ablation"):
            runs = getattr(inp, name)
            if not runs.empty and "variant" in runs:
                drop[name] = runs[runs["variant"] != "dyt"]
        return claim(dataclasses.replace(inp, **drop))

    return judged


def loss_gaps(runs: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """Per width with baseline, TAPER and dyt runs: (TAPER's gap, DyT's gap) to the baseline in %
    (inf for a cell whose seeds all diverged); widths whose baseline all diverged are left out."""
    stats, out = stats_by_cell(runs), {}
    for width in sorted({w for w, _ in stats}):
        cells = [stats.get((width, v)) for v in ("baseline", TAPER, "dyt")]
        if any(c is None for c in cells) or cells[0].all_diverged:
            continue
        base, *mine = cells
        out[width] = tuple(math.inf if c.all_diverged else gap_pct(c.mean, base.mean) for c in mine)
    return out


def speedups(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per benchmark with DyT rows (forward; decode per mode): the median over cells of the folded
    model's and of DyT's speedup over the baseline."""
    out = {}
    for s in benchmarks.speedup_summary(df):
        if "dyt" in s:
            name = "forward" if s["benchmark"] == "forward" else f"decode {s['mode']}"
            out[name] = (s["folded"]["median"], s["dyt"]["median"])
    return out


def claim_dyt(inp: ClaimInputs) -> dict:
    runs = inp.runs
    if runs.empty or "dyt" not in set(runs["variant"].dropna()):
        return not_measured(CLAIM, PAPER, "no DyT pre-training runs given")
    gaps = loss_gaps(runs)
    if not gaps:
        return not_measured(CLAIM, PAPER, f"no width has baseline, {TAPER} and dyt runs")
    loss_ok = [taper <= dyt for taper, dyt in gaps.values()]
    ours = [f"d={w}: gap Taper {t:+.2f}%, DyT {d:+.2f}%" for w, (t, d) in gaps.items()]
    speed = speedups(inp.bench) if not inp.bench.empty else {}
    speed_ok = [folded >= dyt for folded, dyt in speed.values()]
    ours += [f"{name}: folded {f:.2f}×, DyT {d:.2f}×" for name, (f, d) in speed.items()]
    if not speed_ok:
        holds = "partly" if all(loss_ok) else "no"
    elif all(loss_ok) and all(speed_ok):
        holds = "yes"
    else:
        holds = "no" if not any(loss_ok) and not any(speed_ok) else "partly"
    comment = (
        "Validation-loss gap to the baseline of the same width (Table 2's outlier rule) of "
        "Internal-Taper (+aux) and of DyT (every norm a DyT, alpha0 as docs/norm-free.md says); "
        "decode and forward speedups over the baseline: medians over cells of per-round time ratios "
        "(folded TaperNorm vs DyT timed as it is, in the same interleaved rounds). Criterion: "
        "TaperNorm's gap <= DyT's at every width and its folded speedup >= DyT's in every benchmark "
        "with DyT rows (yes); neither anywhere (no); else partly"
        + ("." if speed_ok else "; no DyT benchmark rows, so at most partly.")
    )
    shown = runs[runs["variant"].isin(["baseline", TAPER, "dyt"])]
    scale = describe_scale(shown[shown["width"].isin(list(gaps))])
    if speed_ok:
        places = {benchmarks.where(part) for _, part in inp.bench.groupby("benchmark")}
        scale += " | benchmarks: " + "; ".join(sorted(places))
    return claim_row(CLAIM, PAPER, "; ".join(ours), scale, holds, comment)
