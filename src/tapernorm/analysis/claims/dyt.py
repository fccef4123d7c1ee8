"""The claims row "TaperNorm vs DyT": two ways to a transformer without per-token normalization at
inference, side by side (DyT: "Transformers without Normalization", Zhu et al. 2025; not in the paper).

Each method is trained by its own recipe and measured against the baseline with the same head: DyT
(its authors' LLaMA recipe, untied head) against Baseline (untied head); Internal-Taper (+aux) (the
paper's recipe, tied head) against the tied Baseline, or, where Internal-Taper (+aux) also ran with
the untied head, that run against the untied baseline (the same footing as DyT).

The criterion and its grading: DYT_CRITERION. The loss half takes a cell whose seeds all diverged
as an infinite gap and each arm at its own best LR where an LR grid at this scale is given
(`tapernorm lr-grid`; its source is named in the row), else the shared LR at every width; the speed
half is the folded model against DyT by the speed rule (speed_rule).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import pandas as pd

from ...variants import PAPER_VARIANTS, baseline_of
from .. import comparable, speed_rule
from ..runs import corpus_of, describe_scale
from ..stats import gap_pct, paired_gap, stats_by_cell
from ..studies.lr_context import lr_note, study_lrs
from ..tables import inference as inference_tables
from .numbers import PAIRED_GAP, Criterion, Numbers, Part, with_numbers
from .rows import (
    NO,
    NOT_RESOLVED,
    PARTLY,
    YES,
    ClaimInputs,
    NoVerdict,
    Verdict,
    because,
    claim_row,
    not_measured,
    plain,
    variant_label,
)

TAPER = "internal_aux"  # the TaperNorm variant compared: internal norms folded, final norm kept
TAPER_UNTIED = "internal_aux_untied"  # the same with DyT's head, preferred where it ran
DYT_CRITERION = Criterion(
    "TaperNorm's validation-loss gap to its matched baseline minus DyT's to its own is <= 0 "
    "(each arm at its best LR where an LR grid at this scale is given), and folded is faster than "
    f"DyT by the {speed_rule.RULE}",
    None,
    0.0,
    grading="Criterion: yes if TaperNorm's loss gap is <= DyT's at every width and folded is faster "
    "by the speed rule; no if DyT is closer and folded is not shown faster (slower, within the "
    "margin or not resolved); else partly.",
)


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


SCALE_KEYS = ("n_embd", "n_layer", "n_head", "block_size", "steps", "batch_size", "corpus")


def grid_mismatch(grid: dict, runs: pd.DataFrame, corpus: str) -> list[str]:
    """How the LR grid's runs differ in scale from `runs` (empty: the grid measures these runs)."""
    scale = grid.get("scale") or {}
    ours = {
        "n_embd": sorted(set(runs["width"])),
        "n_layer": sorted(set(runs["n_layer"])),
        "n_head": sorted(set(runs["n_head"])),
        "block_size": sorted(set(runs["block_size"])),
        "steps": sorted(set(runs["steps"])),
        "batch_size": sorted(set(runs["batch_size"])),
        "corpus": [corpus],
    }
    return [
        f"{k} {scale.get(k)} vs {ours[k][0] if len(ours[k]) == 1 else ours[k]}"
        for k in SCALE_KEYS
        if [scale.get(k)] != ours[k]
    ]


def grid_source(grid: dict) -> str:
    """'the LR grid results/cpu/lr_grid (commit 0123456789ab, Intel Xeon, 2 seeds)'."""
    made, scale = grid.get("made") or {}, grid.get("scale") or {}
    commit = str(made.get("commit", "unknown"))[:12]
    seeds = len(scale.get("seeds", []))
    where = (made.get("host") or {}).get("cpu", "host unknown")
    return f"LR grid {grid.get('path', '')} (a committed study: commit {commit}, {where}, {seeds} seeds)"


def best_lr_gaps(grid: dict) -> dict[str, dict]:
    """variant -> its gap row of the LR grid (gap at the shared LR and with each arm at its best)."""
    return {g["variant"]: g for g in grid.get("gaps", [])}


@dataclasses.dataclass(frozen=True, eq=False)
class DytClaim:
    """The TaperNorm-vs-DyT row measured: its inputs, the loss gaps per width (loss_gaps) and
    the runs they compare (`shown`), the loss half (LossHalf) and the speed half (speed_half:
    its state, the verdict's words, the lines for Ours)."""

    inp: ClaimInputs
    gaps: dict[int, tuple[Gap, Gap]]
    shown: pd.DataFrame
    loss: LossHalf
    speed_state: str | None
    speed: str
    speed_lines: list[str]


def measure_dyt(inp: ClaimInputs) -> DytClaim | NoVerdict:
    runs = inp.runs
    if runs.empty or "dyt" not in set(runs["variant"].dropna()):
        return not_measured("no DyT pre-training runs given")
    gaps = loss_gaps(runs)
    if not gaps:
        return not_measured(
            f"no width has {TAPER}, dyt and their matched baselines (the same head)"
        )
    compared = {v for pair in gaps.values() for g in pair for v in (g.variant, g.against)}
    shown = runs[runs["variant"].isin(compared) & runs["width"].isin(list(gaps))]
    unread = comparable.unread_data(shown) if inp.lr_grid else []
    if unread:  # whether the LR grid is at these runs' scale (its corpus) cannot be told
        return not_measured(
            "whether the LR grid is at these runs' corpus is " + comparable.unread_data_text(unread)
        )
    return DytClaim(inp, gaps, shown, _loss_half(inp, shown, gaps), *speed_half(inp))


def judge_dyt(m: DytClaim) -> Verdict:
    return _dyt_holds(m.loss.ok, m.loss.where, m.speed_state, m.speed)


def describe_dyt(m: DytClaim, holds: Verdict) -> dict:
    inp = m.inp
    scale = describe_scale(m.shown)
    if m.speed_state is not None:
        scale += " | benchmarks: " + inference_tables.places(inp.bench)
    ours = "; ".join(m.loss.lines + m.speed_lines + study_lr_lines(inp))
    row = claim_row(ours, scale, holds, _dyt_comment(inp, m.loss.note))
    return with_numbers(row, dyt_numbers(inp.runs, m.gaps, m.loss.judged, m.loss.grid))


def study_lr_lines(inp: ClaimInputs) -> list[str]:
    """Where the scaling study's DyT runs sit on the LR grid ('scaling study's DyT runs at LR 0.001,
    32x below DyT's best LR 0.032 on the LR grid (...)'), read from their configs and the grid;
    none without both or where the study has no DyT records."""
    if inp.scaling is None or not inp.lr_grid or "source" not in inp.scaling.attrs:
        return []
    note = lr_note(study_lrs(inp.scaling.attrs["source"], "dyt"), inp.lr_grid, "dyt")
    return [f"scaling study's DyT runs {note}"] if note else []


@dataclasses.dataclass(frozen=True)
class LossHalf:
    """The loss half of the DyT claim: where it is judged and what it found."""

    ok: list[bool]  # TaperNorm's gap <= DyT's: per width, or once with each arm at its best LR
    where: str  # "at the shared LR" or "each arm at its own best LR"
    judged: tuple  # dyt_numbers' `judged`
    lines: list[str]  # for the row's Ours
    note: str = ""  # the comment's note on the LR grid
    grid: dict | None = None  # the LR grid that judged it


def _loss_half(inp: ClaimInputs, shown: pd.DataFrame, gaps: dict[int, tuple[Gap, Gap]]) -> LossHalf:
    """At the shared LR, unless an LR grid at the runs' scale has both arms: then with each arm at
    its own best LR (the shared LR is the baseline's setting, where the arms need not be at their
    best)."""
    lines, judged = _shared_lr_loss(shown, gaps)
    shared = LossHalf([t.pct <= d.pct for t, d in gaps.values()], "at the shared LR", judged, lines)
    if not inp.lr_grid:
        return shared
    note, at_best, line = _best_lr_loss(inp.lr_grid, shown)
    if at_best is None:
        return dataclasses.replace(shared, note=note)
    ok = [_finite_le(at_best[1], at_best[2])]
    return LossHalf(ok, "each arm at its own best LR", at_best, [*lines, line], note, inp.lr_grid)


def _shared_lr_loss(
    shown: pd.DataFrame, gaps: dict[int, tuple[Gap, Gap]]
) -> tuple[list[str], tuple]:
    """The loss half at the shared LR: (each width's gaps as Ours states them, `judged` as
    dyt_numbers takes it: the widest width's)."""
    lrs = sorted(set(shown["lr"])) if "lr" in shown else []
    at = f" at the shared LR {lrs[0]:g}" if len(lrs) == 1 else ""
    ours = [
        f"d={w}{at}: {variant_label(t.variant)} {t.pct:+.2f}% vs {variant_label(t.against)}, "
        f"DyT {d.pct:+.2f}% vs {variant_label(d.against)}"
        for w, (t, d) in gaps.items()
    ]
    width, (t_gap, d_gap) = max(gaps.items())
    return ours, (t_gap.variant, t_gap.pct, d_gap.pct, f"d={width}{at}", None)


def _best_lr_loss(grid: dict, shown: pd.DataFrame) -> tuple[str, tuple | None, str]:
    """The loss half with each arm at its own best LR from an LR grid: (the comment's note on the
    grid, `judged` as dyt_numbers takes it, the line for Ours). `judged` is None where the grid is
    not at the runs' scale or lacks an arm: the shared LR decides then."""
    mismatch = grid_mismatch(grid, shown, corpus_of(shown))
    if mismatch:
        return (
            f" The {grid_source(grid)} is not at this scale ({'; '.join(mismatch)}): not used.",
            None,
            "",
        )
    best = best_lr_gaps(grid)
    arms = [v for v in (TAPER_UNTIED, TAPER) if v in best][:1]
    if not arms or "dyt" not in best:
        return "", None, ""
    t, d = best[arms[0]], best["dyt"]
    seeds = len((grid.get("scale") or {}).get("seeds", [])) or None
    judged = (arms[0], t["gap_best_pct"], d["gap_best_pct"], "each arm at its best LR", seeds)
    line = (
        f"each arm at its best LR ({grid_source(grid)}): {variant_label(arms[0])} "
        f"{_pct(t['gap_best_pct'])} (LR {t['best_lr']:g}) vs {t['against']} "
        f"(LR {t['baseline_best_lr']:g}), DyT {_pct(d['gap_best_pct'])} (LR {d['best_lr']:g})"
    )
    note = (
        f" The loss half is judged with each arm at its own best LR from the "
        f"{grid_source(grid)}, at this run's scale: the shared LR is the baseline's "
        "setting, where the arms need not be at their best."
    )
    return note, judged, line


def speed_half(inp: ClaimInputs) -> tuple[str | None, str, list[str]]:
    """Folded vs DyT by the speed rule (speed_rule): (the state: YES where folded is faster by the
    margin, NO where it is slower or within the margin, NOT_RESOLVED, or None where not judged: no
    DyT rows or disturbed timings; the speed text of the verdict; the lines for Ours)."""
    bench = inp.bench
    disturbed = inference_tables.disturbed_cells(bench) if not bench.empty else []
    apart = inference_tables.separated(bench, "folded", "dyt") if not bench.empty else {}
    speed = "not judged, disturbed timing" if disturbed else "no DyT benchmark rows"
    timed = set(bench["variant"]) if not bench.empty else set()
    not_timed = "; ".join(inp.bench_skipped)
    if not_timed and not {"folded", "dyt"} <= timed:
        speed = f"not timed ({not_timed})"
    if not apart or disturbed:
        return None, speed, []
    decision, used = speed_rule.judge(bench, inp.bench_pool, "folded", "dyt")
    lines = [
        f"{name}: folded faster than DyT in {a}/{n} cells, slower in {b}/{n} "
        "(interquartile ranges apart)"
        for name, (a, b, n) in apart.items()
    ]
    lines.append(
        f"{decision.said('folded', 'DyT')}. {speed_rule.pool_note(used, decision.left_out)}"
    )
    state, said = SPEED_STATES[decision.state]
    return state, f"{said} ({decision.text('folded', 'DyT')})", lines


# the speed rule's state -> (the speed half's state, its words in the verdict)
SPEED_STATES = {
    speed_rule.FASTER: (YES, "folded faster"),
    speed_rule.SLOWER: (NO, "DyT faster"),
    speed_rule.WITHIN: (NO, f"no gain of {speed_rule.MARGIN:.0%}"),
    speed_rule.NOT_RESOLVED: (NOT_RESOLVED, "not resolved"),
}


def _dyt_holds(
    loss_ok: list[bool], loss_where: str, speed_state: str | None, speed: str
) -> Verdict:
    """Yes if TaperNorm is closer in loss everywhere and folded faster by the
    speed rule; no if DyT is closer and folded is not shown faster; else partly (both halves
    said)."""
    loss_state = YES if all(loss_ok) else NO if not any(loss_ok) else PARTLY
    loss = (
        f"TaperNorm closer {loss_where}"
        if loss_state == YES
        else f"DyT closer {loss_where}"
        if loss_state == NO
        else f"TaperNorm closer at {sum(loss_ok)}/{len(loss_ok)} widths {loss_where}"
    )
    if loss_state == YES and speed_state == YES:
        return plain(YES)
    both = f"loss: {loss}; speed: {speed}"
    if loss_state == NO and speed_state in (NO, NOT_RESOLVED, None):
        return because(NO, both)
    return because(PARTLY, both)


def _dyt_comment(inp: ClaimInputs, grid_note: str) -> str:
    comment = (
        "Validation-loss gap of each method to the baseline with its head (Table 2's outlier "
        "rule): DyT by its authors' LLaMA recipe (untied head, no DyT bias, embedding scalar, "
        "alpha0 by width; docs/norm-free.md) vs Baseline (untied head); Internal-Taper (+aux) vs "
        "the baseline with the same head. Speed: folded TaperNorm and DyT timed as they are in the "
        f"same interleaved rounds, folded against DyT by the {speed_rule.RULE}; the per-benchmark "
        "counts of cells whose interquartile ranges lie apart are shown, not judged. "
        f"{DYT_CRITERION.grading}" + grid_note
    )
    if not_timed := "; ".join(inp.bench_skipped):
        comment += f" Not timed: {not_timed}."
    if not inp.lr_grid:
        comment += (
            " Each arm at its own best LR is not measured here (no LR grid given: tapernorm "
            "lr-grid), so the loss half rests on the shared LR, where the arms need not be at "
            "their best."
        )
    return comment


def dyt_numbers(
    runs: pd.DataFrame, gaps: dict[int, tuple[Gap, Gap]], judged: tuple, grid: dict | None
) -> Numbers:
    """TaperNorm's gap minus DyT's (percentage points) where the loss half is judged, as the
    headline; each arm's gap paired by seed at the shared LR (per width) and, with a grid, at its
    best LR, as parts. `judged`: (TaperNorm's variant, its gap, DyT's gap, where, seeds)."""
    variant, taper_pct, dyt_pct, where, seeds = judged
    parts = []
    for width, pair in gaps.items():
        for g in pair:
            p = paired_gap(runs, width, g.variant, g.against)
            pairing = f"{variant_label(g.variant)} vs {variant_label(g.against)}"
            label = f"d={width}, shared LR, paired by seed: {pairing}"
            parts.append(Part(label, p.mean, p.lo, p.hi, p.n, PAIRED_GAP, g.variant))
            if grid is None and g.variant == "dyt" and width == max(gaps):
                seeds = p.n
    if grid:
        best = best_lr_gaps(grid)
        for v in (variant, "dyt"):
            label = f"each at its best LR ({grid_source(grid)}): {variant_label(v)} vs {best[v]['against']}"
            parts.append(Part(label, best[v]["gap_best_pct"], n_seeds=seeds, variant=v))
    finite = [math.inf if x is None else x for x in (taper_pct, dyt_pct)]
    return Numbers(
        headline=f"loss gap {where}: {variant_label(variant)} {_pct(taper_pct)} vs DyT {_pct(dyt_pct)}",
        unit="percentage points (TaperNorm's gap minus DyT's; parts: each arm's gap, %)",
        estimate=finite[0] - finite[1],
        n_seeds=seeds,
        interval="parts: 95% t interval of each arm's gap paired by seed",
        parts=tuple(parts),
    )


def _finite_le(a: float | None, b: float | None) -> bool:
    """a <= b, where None (every seed diverged) is an infinite gap."""
    a = math.inf if a is None else a
    b = math.inf if b is None else b
    return a <= b


def _pct(value: float | None) -> str:
    return "diverged" if value is None or value == math.inf else f"{value:+.2f}%"
