"""Claims 1 and 2: Internal-Taper (+aux) and All-Taper (+aux) end within ~2% of the baseline's
validation loss, judged on the gap paired by seed and its 95% interval (stats.paired_gap), per width
(`within_verdict`), the widths combined (`combine_widths`), blow-ups limiting the verdict
(`limit_by_blowups`): GAP_CRITERION's grading and BLOWUP_RULE state it (the scaling study's rows,
analysis/studies/scaling.py, follow the same rules). The comment adds the variants that share the
claim's final norm (kept or tapered), seed by seed: an offset they all share is a property of the
final norm, not of the claim's variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...variants import PAPER_VARIANTS, VARIANTS
from .. import paper
from ..runs import blown_up, blowup_text, describe_scale, diverged_text
from ..stats import PairedGap, last_weights_gap, paired_gap, stats_by_cell
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
    unlike_paper,
    variant_label,
)

GAP_MAX_PCT = 2.0
BLOWUP_RULE = (
    "a run of either compared arm that blew up (diverged, or a finite spike: a training loss above "
    "2x the median of its recent logged losses or a gradient norm above 100x the clip, "
    "training/blowups.py) limits the loss verdict: a yes becomes partly; the gap is over the seed "
    "pairs where neither run blew up, and beside it is the gap with the blown-up runs counted at "
    "the validation loss of the weights they kept"
)
GAP_CRITERION = Criterion(
    f"the 95% interval of the gap to the baseline's validation loss, paired by seed, lies inside "
    f"±{GAP_MAX_PCT:g}% (at every width)",
    -GAP_MAX_PCT,
    GAP_MAX_PCT,
    grading=f"Criterion per width: yes if the interval lies inside ±{GAP_MAX_PCT:g}%, no if it "
    "lies wholly outside, not resolved if it straddles an edge or there is one pair; widths combine "
    "as no if all no, partly if some, not resolved if any, else yes; a yes wholly below 0 is "
    "'unlike the paper' (the paper's gaps are small increases). Blow-ups: "
    f"{BLOWUP_RULE}.",
)


def limit_by_blowups(verdict: str, n_blown: int) -> str:
    """BLOWUP_RULE on a plain verdict: a yes with `n_blown` > 0 runs that blew up is partly."""
    return PARTLY if verdict == YES and n_blown else verdict


def blown_runs_text(runs: pd.DataFrame) -> str:
    """'Internal-Taper (+aux) seed 2: a divergence at step 1,750 (g=0.077; diverged), weights of
    step 1,600' for each run of `runs` that blew up ('' when none)."""
    out = []
    for r in runs[blown_up(runs)].sort_values(["variant", "seed"]).to_dict("records"):
        label = VARIANTS[r["variant"]]["label"] if r.get("variant") in VARIANTS else r["name"]
        unit = f"seed {r['seed']}"
        if "data_seed" in r and r["data_seed"] != r["seed"]:
            unit = f"init {r['seed']}, data {r['data_seed']}"
        if "compiled" in r and "compiled" in runs and runs["compiled"].nunique() > 1:
            unit += ", compiled" if r["compiled"] else ", eager"
        text = f"{label} {unit}: {blowup_text(r)}"
        weights = r.get("weights_step")
        if weights is not None and not pd.isna(weights):
            if int(weights) != int(r["steps"]):
                text += f", its weights of step {int(weights):,} (of {int(r['steps']):,})"
        out.append(text)
    return "; ".join(out)


def within_verdict(gap: PairedGap) -> tuple[str, str]:
    """(yes | no | not resolved, why) for 'the gap lies within ±GAP_MAX_PCT %', from the 95%
    interval."""
    limit = GAP_MAX_PCT
    if gap.n < 2:
        return NOT_RESOLVED, f"{gap.n} seed pair: no interval"
    if -limit <= gap.lo and gap.hi <= limit:
        return YES, f"95% interval {gap.interval()} inside ±{limit:g}%"
    if gap.hi < -limit:
        return NO, f"95% interval {gap.interval()} below -{limit:g}% (better than the baseline)"
    if gap.lo > limit:
        return NO, f"95% interval {gap.interval()} above +{limit:g}%"
    return NOT_RESOLVED, f"95% interval {gap.interval()} straddles ±{limit:g}%"


def combine_widths(verdicts: list[str]) -> str:
    """Per-width verdicts of claims 1 and 2 combined (module docstring)."""
    if all(v == NO for v in verdicts):
        return NO
    if NO in verdicts:
        return PARTLY
    return NOT_RESOLVED if NOT_RESOLVED in verdicts else YES


def siblings(variant: str) -> list[str]:
    """The paper's tapered variants that share `variant`'s final norm (both kept, or both tapered)."""
    tapered = VARIANTS[variant]["taper"] in ("final", "all")
    return [
        v
        for v in PAPER_VARIANTS
        if v != "baseline" and (VARIANTS[v]["taper"] in ("final", "all")) == tapered
    ]


def offset_note(runs, width: int, variant: str) -> str:
    """The paired gaps of the variants that share `variant`'s final norm, and whether every one of
    their seed pairs falls on one side of the baseline (an offset they share) or not."""
    gaps = [paired_gap(runs, width, v, "baseline") for v in siblings(variant)]
    gaps = [g for g in gaps if g.n]
    if len(gaps) < 2:
        return ""
    tapered = VARIANTS[variant]["taper"] in ("final", "all")
    which = "without a final norm" if tapered else "that keep the final norm"
    listed = "; ".join(
        f"{variant_label(g.variant)} {g.mean:+.2f}% ({g.seeds_text()})" for g in gaps
    )
    every = [x for g in gaps for x in g.per_seed.values()]
    text = f" d={width}, the tapered variants {which}, paired by seed: {listed}."
    if all(x < 0 for x in every) or all(x > 0 for x in every):
        side = "below" if every[0] < 0 else "above"
        nearest = min(abs(x) for x in every)
        text += (
            f" All {len(every)} seed pairs lie {side} the baseline (the nearest by {nearest:.2f}%):"
            " an offset these variants share, which follows the final norm rather than the"
            f" claim's {variant_label(variant)} alone."
        )
    else:
        text += " Their seed pairs fall on both sides of the baseline: no shared offset."
    return text


def _paper_steps() -> str:
    """The paper's training lengths, '500k-1M' (Table 5)."""

    def short(n: int) -> str:
        return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n // 1000}k"

    steps = paper.TABLE5_STEPS.values()
    return f"{short(min(steps))}-{short(max(steps))}"


@dataclass(frozen=True)
class WidthGap:
    """Claim 1 or 2 measured at one width: the gap over the seed pairs where neither run blew up
    (`gap`), how many of the variant's runs diverged and whether all did, and, where a run of
    either arm blew up, the gap with the blown-up runs at their last weights (`full`) and the
    blow-ups named (`blown`)."""

    gap: PairedGap
    n_diverged: int
    all_diverged: bool
    full: PairedGap | None = None
    blown: str = ""

    @property
    def width(self) -> int:
        return self.gap.width


def measure_gaps(runs: pd.DataFrame, variant: str) -> list[WidthGap]:
    """`variant` against the baseline at each width that has runs of both (none: [])."""
    stats = stats_by_cell(runs)
    widths = sorted(w for (w, v) in stats if v == variant and (w, "baseline") in stats)
    out = []
    for w in widths:
        arms = runs[(runs["width"] == w) & runs["variant"].isin([variant, "baseline"])]
        blew = bool(blown_up(arms).any())
        out.append(
            WidthGap(
                gap=paired_gap(runs, w, variant, "baseline", clean=True),
                n_diverged=len(stats[(w, variant)].diverged),
                all_diverged=stats[(w, variant)].all_diverged,
                full=last_weights_gap(runs, w, variant, "baseline") if blew else None,
                blown=blown_runs_text(arms) if blew else "",
            )
        )
    return out


def width_verdict(measured: WidthGap) -> tuple[str, str]:
    """(yes | no | not resolved, why) at one width: within_verdict, but no where every run of the
    variant diverged (it did not train there: not within 2%)."""
    if measured.all_diverged:
        return NO, f"every {variant_label(measured.gap.variant)} run diverged"
    return within_verdict(measured.gap)


def judge_gaps(measured: list[WidthGap], paper_range: str) -> Verdict:
    """GAP_CRITERION's grading over the widths: combined, limited by blow-ups, a yes wholly below 0
    "unlike the paper", a no or not resolved with the widths that made it."""
    verdicts = [width_verdict(m) for m in measured]
    grade = limit_by_blowups(
        combine_widths([v for v, _ in verdicts]), sum(bool(m.blown) for m in measured)
    )
    below = [
        f"d={m.width}: {m.gap.mean:+.2f}% {m.gap.interval()}"
        for m, (v, _) in zip(measured, verdicts, strict=True)
        if v == YES and m.gap.hi < 0
    ]
    if grade == YES and below:
        return unlike_paper("; ".join(below), paper_range)
    if grade in (NO, NOT_RESOLVED):
        widths = zip(measured, verdicts, strict=True)
        return because(
            grade, "; ".join(f"d={m.width}: {why}" for m, (v, why) in widths if v == grade)
        )
    return plain(grade)


def paper_gap_range(variant: str) -> str:
    """The paper's range of `variant`'s gap to the baseline over Table 2's widths."""
    cells = [p for (w, v), p in paper.TABLE2.items() if v == variant]
    return f"+{min(c.gap_pct for c in cells):.2f}% to +{max(c.gap_pct for c in cells):.2f}%"


def paper_gap_value(variant: str) -> str:
    """Claims 1 and 2's paper value: the range of Table 2's gaps and its setting."""
    return f"{paper_gap_range(variant)} (1M-30M, TinyStories, 6 seeds)"


def gap_statement(variant: str) -> str:
    """Claims 1 and 2 as the paper states them of `variant`."""
    return f"{variant_label(variant)} validation loss within ~2% of the baseline"


@dataclass(frozen=True, eq=False)
class GapClaim:
    """Claim 1 or 2 measured: `variant` against the baseline at each width of `runs` (the
    pre-training runs) that has both."""

    variant: str
    widths: list[WidthGap]
    runs: pd.DataFrame


def measure_gaps_of(inp: ClaimInputs, variant: str) -> GapClaim | NoVerdict:
    if inp.runs.empty:
        return not_measured("no pre-training runs given")
    measured = measure_gaps(inp.runs, variant)
    if not measured:
        return not_measured(f"no width has both baseline and {variant} runs")
    return GapClaim(variant, measured, inp.runs)


def measure_internal_aux(inp: ClaimInputs) -> GapClaim | NoVerdict:
    """Claim 1's measure: Internal-Taper (+aux)'s gaps."""
    return measure_gaps_of(inp, "internal_aux")


def measure_all_aux(inp: ClaimInputs) -> GapClaim | NoVerdict:
    """Claim 2's measure: All-Taper (+aux)'s gaps."""
    return measure_gaps_of(inp, "all_aux")


def judge_gap_claim(m: GapClaim) -> Verdict:
    return judge_gaps(m.widths, paper_gap_range(m.variant))


def describe_gap_claim(m: GapClaim, holds: Verdict) -> dict:
    """The gap per width with its interval and seed pairs, the blow-ups, the diverged runs, the
    final norm's shared offset and the steps against the paper's."""
    runs, variant, measured = m.runs, m.variant, m.widths
    widths = [w.width for w in measured]
    ours = [_gap_text(w) for w in measured]
    reasons = [f"d={w.width}: {width_verdict(w)[1]}" for w in measured]
    whys = [_seeds_text(w.gap) for w in measured]
    blown = [f"d={w.width}: {w.blown}" for w in measured if w.blown]
    comment = (
        f"Gap to the baseline paired by seed (seed s of both variants: the same init stream and "
        f"batches), mean and 95% t interval over the pairs: {'; '.join(reasons)} "
        f"({' | '.join(whys)}). {GAP_CRITERION.grading} "
        f"{sum(w.n_diverged for w in measured)} {variant} run(s) diverged."
    )
    if blown:
        comment += f" Blew up: {' | '.join(blown)}."
    compared = runs[runs["variant"].isin([variant, "baseline"])]
    if named := diverged_text(compared[compared["width"].isin(widths)]):
        comment += f" Diverged, excluded: {named}."
    comment += "".join(offset_note(runs, w, variant) for w in widths)
    steps = sorted(runs["steps"].unique())
    comment += (
        f" Our runs are {', '.join(f'{s:,}' for s in steps)} steps vs the paper's "
        f"{_paper_steps()} ({paper.TABLE5_SOURCE.tag})."
    )
    scale = describe_scale(runs[runs["width"].isin(widths)])
    row = claim_row("; ".join(ours), scale, holds, comment)
    return with_numbers(row, gap_numbers([w.gap for w in measured], ours[-1]))


def _gap_text(m: WidthGap) -> str:
    """'d=64: +1.13% [+0.40%, +1.86%] (3 seed pairs)', with the blown-up runs' gap where any."""
    text = f"d={m.width}: {m.gap.text()}"
    if m.full is not None:
        text += f"; with the blown-up runs at their last weights {m.full.text()}"
        if m.full.left_out:
            text += f" (left out: {', '.join(m.full.left_out)})"
    return text


def _seeds_text(gap: PairedGap) -> str:
    text = f"d={gap.width}: {gap.seeds_text() if gap.n else 'no seed pair'}"
    if gap.left_out:
        text += f"; left out: {', '.join(gap.left_out)}"
    return text


def gap_numbers(gaps: list[PairedGap], headline: str) -> Numbers:
    """The paired gap at the largest width as the headline, every width as a part."""
    last = gaps[-1]
    return Numbers(
        headline=headline,
        unit="%",
        estimate=last.mean,
        ci_low=last.lo,
        ci_high=last.hi,
        interval="95% t interval over the seed pairs",
        n_seeds=last.n,
        no_estimate=None if last.n else f"d={last.width}: no seed pair",
        parts=tuple(
            Part(
                f"d={g.width}: {variant_label(g.variant)} vs Baseline",
                g.mean,
                g.lo,
                g.hi,
                g.n,
                PAIRED_GAP,
                g.variant,
            )  # fmt: skip
            for g in gaps
        ),
    )
