"""The claims row "TaperNorm vs DyT": two ways to a transformer without per-token normalization at
inference, side by side (DyT: "Transformers without Normalization", Zhu et al. 2025; not in the paper).

Each method is trained by its own recipe and measured against the baseline with the same head: DyT
(its authors' LLaMA recipe, untied head) against Baseline (untied head); Internal-Taper (+aux) (the
paper's recipe, tied head) against the tied Baseline, or, where Internal-Taper (+aux) also ran with
the untied head, that run against the untied baseline (the same footing as DyT).

Criterion (fixed here, stated in the row): at every width with both gaps, TaperNorm's validation-loss
gap to its matched baseline is <= DyT's (a DyT cell whose seeds all diverged counts as an infinite
gap), and in every benchmark measured with DyT rows (forward; decode per mode) the folded model's
median speedup over the baseline is >= DyT's. yes if both hold everywhere, no if neither holds
anywhere, else partly; without DyT benchmark rows, at most partly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import pandas as pd

from ..config import PAPER_VARIANTS, VARIANTS, baseline_of
from . import inference_tables
from .claim_rows import NO, PARTLY, YES, ClaimInputs, claim_row, not_measured
from .runs import describe_scale
from .stats import gap_pct, stats_by_cell

TAPER = "internal_aux"  # the TaperNorm variant compared: internal norms folded, final norm kept
TAPER_UNTIED = "internal_aux_untied"  # the same with DyT's head, preferred where it ran
CLAIM = (
    "TaperNorm vs DyT: Internal-Taper (+aux) as close to its matched baseline's loss as DyT to its "
    "own, and faster folded"
)
PAPER = "— (DyT is not in the paper; our comparison)"


def paper_variants_only(claim: Callable[[ClaimInputs], dict]) -> Callable[[ClaimInputs], dict]:
    """`claim` judged on the paper's six variants only: DyT has no norm to keep or taper and the
    untied-head runs are its comparison, so none belongs to the paper's final-norm comparisons
    (claims 3-5)."""

    @functools.wraps(claim)
    def judged(inp: ClaimInputs) -> dict:
        drop = {}
        for name in ("runs", "ablation"):
            runs = getattr(inp, name)
            if not runs.empty and "variant" in runs:
                drop[name] = runs[runs["variant"].isin(PAPER_VARIANTS)]
        return claim(dataclasses.replace(inp, **drop))

    return judged


@dataclasses.dataclass(frozen=True)
class Gap:
    variant: str
    against: str
    pct: float  # inf where every seed diverged


def loss_gaps(runs: pd.DataFrame) -> dict[int, tuple[Gap, Gap]]:
    """Per width with a TaperNorm and a DyT cell and their matched baselines: (TaperNorm's gap, DyT's
    gap) in %; TAPER_UNTIED is TaperNorm's cell where it ran, else TAPER. Widths whose baseline all
    diverged are left out."""
    stats, out = stats_by_cell(runs), {}
    for width in sorted({w for w, _ in stats}):
        taper = TAPER_UNTIED if (width, TAPER_UNTIED) in stats else TAPER
        gaps = []
        for variant in (taper, "dyt"):
            base, mine = stats.get((width, baseline_of(variant))), stats.get((width, variant))
            if base is None or mine is None or base.all_diverged:
                break
            pct = math.inf if mine.all_diverged else gap_pct(mine.mean, base.mean)
            gaps.append(Gap(variant, baseline_of(variant), pct))
        if len(gaps) == 2:
            out[width] = tuple(gaps)
    return out


def speedups(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per benchmark with DyT rows (forward; decode per mode): the median over cells of the folded
    model's and of DyT's speedup over the baseline."""
    out = {}
    for s in inference_tables.speedup_summary(df):
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
        return not_measured(
            CLAIM, PAPER, f"no width has {TAPER}, dyt and their matched baselines (the same head)"
        )
    loss_ok = [taper.pct <= dyt.pct for taper, dyt in gaps.values()]
    compared = {v for pair in gaps.values() for g in pair for v in (g.variant, g.against)}
    shown = runs[runs["variant"].isin(compared) & runs["width"].isin(list(gaps))]
    lrs = sorted(set(shown["lr"])) if "lr" in shown else []
    at = f" at the shared LR {lrs[0]:g}" if len(lrs) == 1 else ""
    ours = [
        f"d={w}{at}: {_label(t.variant)} {t.pct:+.2f}% vs {_label(t.against)}, "
        f"DyT {d.pct:+.2f}% vs {_label(d.against)}"
        for w, (t, d) in gaps.items()
    ]
    disturbed = inference_tables.disturbed_cells(inp.bench) if not inp.bench.empty else []
    speed = speedups(inp.bench) if not inp.bench.empty and not disturbed else {}
    no_speed = "not judged, disturbed timing" if disturbed else "no DyT benchmark rows"
    speed_ok = [folded >= dyt for folded, dyt in speed.values()]
    ours += [f"{name}: folded {f:.2f}×, DyT {d:.2f}×" for name, (f, d) in speed.items()]
    if not speed_ok:
        holds = PARTLY if all(loss_ok) else NO
    elif all(loss_ok) and all(speed_ok):
        holds = YES
    else:
        holds = NO if not any(loss_ok) and not any(speed_ok) else PARTLY
    if holds == PARTLY:
        speed_part = (
            f"folded >= DyT in {sum(speed_ok)}/{len(speed_ok)} benchmarks" if speed_ok else no_speed
        )
        holds += f" (loss: TaperNorm closer at {sum(loss_ok)}/{len(loss_ok)} widths; speed: {speed_part})"
    comment = (
        "Validation-loss gap of each method to the baseline with its head, at the shared LR "
        "(Table 2's outlier rule): DyT by its authors' LLaMA recipe (untied head, no DyT bias, "
        "embedding scalar, alpha0 by width; docs/norm-free.md) vs Baseline (untied head); "
        "Internal-Taper (+aux) vs the baseline with the same head. Judged at the shared LR only: "
        "each arm at its own best LR is a separate study (tapernorm lr-grid; docs/norm-free.md "
        "has its result, which this row does not read). Decode and forward speedups over the "
        "baseline: "
        "medians over cells of per-round time ratios (folded TaperNorm vs DyT timed as it is, in "
        "the same interleaved rounds). Criterion: TaperNorm's gap <= DyT's at every width and its "
        "folded speedup >= DyT's in every benchmark with DyT rows (yes); neither anywhere (no); "
        "else partly" + ("." if speed_ok else f"; speed {no_speed}, so at most partly.")
    )
    scale = describe_scale(shown)
    if speed_ok:
        places = {inference_tables.where(part) for _, part in inp.bench.groupby("benchmark")}
        scale += " | benchmarks: " + "; ".join(sorted(places))
    return claim_row(CLAIM, PAPER, "; ".join(ours), scale, holds, comment)


def _label(variant: str) -> str:
    return VARIANTS[variant]["label"]
