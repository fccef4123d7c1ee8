"""Claims 1 and 2: Internal-Taper (+aux) and All-Taper (+aux) end within ~2% of the baseline's
validation loss (criterion in claims.py)."""

from __future__ import annotations

import math

from . import paper
from .claim_rows import ClaimInputs, claim_row, not_measured, variant_label
from .runs import describe_scale
from .stats import fmt_cell, gap_pct, stats_by_cell

GAP_MAX_PCT = 2.0


def _gap_claim(inp: ClaimInputs, number: int, variant: str) -> dict:
    cells = [p for (w, v), p in paper.TABLE2.items() if v == variant]
    lo, hi = min(c.gap_pct for c in cells), max(c.gap_pct for c in cells)
    claim = f"{number}. {variant_label(variant)} validation loss within ~2% of the baseline"
    paper_value = f"+{lo:.2f}% to +{hi:.2f}% (1M-30M, TinyStories)"
    if inp.runs.empty:
        return not_measured(claim, paper_value, "no pre-training runs given")
    stats = stats_by_cell(inp.runs)
    widths = sorted(w for (w, v) in stats if v == variant and (w, "baseline") in stats)
    if not widths:
        return not_measured(claim, paper_value, f"no width has both baseline and {variant} runs")
    ours, parts, within, gaps, n_div, noise = [], [], [], [], 0, []
    for w in widths:
        base, mine = stats[(w, "baseline")], stats[(w, variant)]
        n_div += len(mine.diverged)
        if mine.all_diverged or base.all_diverged:
            ours.append(f"d={w}: {'baseline ' if base.all_diverged else ''}diverged")
            parts.append(ours[-1])
            within.append(False)
            continue
        gap = gap_pct(mine.mean, base.mean)
        ours.append(f"d={w}: {gap:+.2f}%")
        parts.append(f"{ours[-1]} ({fmt_cell(mine)} vs {fmt_cell(base)})")
        within.append(gap <= GAP_MAX_PCT)
        gaps.append(gap)
        noise += [100 * s / base.mean for s in (mine.std, base.std) if math.isfinite(s)]
    holds = "yes" if all(within) else "no" if not any(within) else "partly"
    if holds == "yes" and n_div:
        holds = "partly"
    scale = describe_scale(inp.runs[inp.runs["width"].isin(widths)])
    comment = (
        f"Gap of the seed mean to the baseline's: {'; '.join(parts)}. "
        f"Criterion: gap <= +{GAP_MAX_PCT:g}% at every width and no divergence (yes), at no width "
        f"(no), else partly; {n_div} {variant} run(s) diverged."
    )
    if noise:
        comment += f" Seed std is up to {max(noise):.2f}% of the baseline loss"
        resolved = any(abs(g) > max(noise) for g in gaps)
        comment += "." if resolved else ", larger than every gap: the gaps are within seed noise."
    if any(g < 0 for g in gaps):
        comment += " A negative gap means below the baseline, unlike the paper's small increase."
    steps = sorted(inp.runs["steps"].unique())
    comment += f" Our runs are {', '.join(f'{s:,}' for s in steps)} steps vs the paper's 500k-1M."
    return claim_row(claim, paper_value, "; ".join(ours), scale, holds, comment)


def claim1(inp: ClaimInputs) -> dict:
    return _gap_claim(inp, 1, "internal_aux")


def claim2(inp: ClaimInputs) -> dict:
    return _gap_claim(inp, 2, "all_aux")
