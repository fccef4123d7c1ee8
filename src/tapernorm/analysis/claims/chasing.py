"""Claims 3-5: without the scale anchor, removing the final norm lets the logits grow (logit
chasing) and splits the gradient norms by final-norm presence; the anchor suppresses both.

Claims 3 and 4 measure the end logit norms on each source (the largest main width and the
ablation), judged where its runs end with at least MARGIN_JUDGED of tokens at a positive margin
(Prop. 4.2's premise; the others are context, and all are judged if none shows its margins), and
combine their judged sources as yes if all yes, no if all no, else partly; claim 4 reports the λ
sweep beside its verdict. Claim 5 measures gradient norms on the first judged source with all six
variants, in both clipping conventions, and checks its premise (claim5_premise). Each criterion's
grading (CHASE_CRITERION, SUPPRESS_CRITERION, GRAD_CRITERION) is stated once, below, and printed in
the claim's comment. Claims 3-5 judge the paper's six variants only (DyT's row is claims.dyt's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ...variants import VARIANTS
from .. import paper
from ..runs import CLIPPED_COLUMNS, GRAD_COLUMNS, describe_scale, diverged_text
from ..stats import gradient_ratios
from .numbers import Criterion, Numbers, Part, with_numbers
from .rows import (
    NO,
    NOT_MEASURED,
    PARTLY,
    SIZE_FACTOR,
    YES,
    ClaimInputs,
    NoVerdict,
    Verdict,
    at_deviation,
    claim_row,
    combine_verdicts,
    grade_size,
    not_judged,
    not_measured,
    not_reproduced,
    plain,
    usable_runs,
    variant_label,
)

CHASE_YES, CHASE_PARTLY = 2.0, 1.2
CLOSE_FACTOR = 1.5
MARGIN_JUDGED = 0.5  # claims 3-5 are judged where most tokens end with a positive margin
SUPPRESS_MIN = (
    0.25  # claim 4 partly: the anchor removes >= this share of ln U (the chasing, log scale)
)
PAPER_ANCHOR = ("eq5", 0.1)  # the paper's pre-training scale loss: Eq. 5 at λ=0.1 (Sec. 3)
FORM_NAMES = {"eq5": "Eq. 5", "relative": "relative"}


def _setting(form: str, lam: float) -> str:
    return f"{FORM_NAMES.get(form, form)} λ={lam:g}"


CHASE_CRITERION = Criterion(
    f"end logit norm of each unanchored variant without a final norm >= {CHASE_YES:g}x that of "
    "the runs keeping a final norm (judged where margins are positive)",
    CHASE_YES,
    None,
    grading=f"Criterion per judged source: each unanchored variant >= {CHASE_YES:g}x yes, their "
    f"mean >= {CHASE_PARTLY:g}x partly, else no; a yes whose ratio is below the paper's "
    f"{paper.FIG3_CHASING_RATIO[0]}x / {SIZE_FACTOR:g} is graded weaker than the paper.",
)
SUPPRESS_CRITERION = Criterion(
    f"All-Taper (+aux)'s end logit norm within {CLOSE_FACTOR:g}x the baseline's (A), where the "
    f"unanchored runs chase (U >= {CHASE_YES:g}x)",
    1 / CLOSE_FACTOR,
    CLOSE_FACTOR,
    grading=f"Criterion per judged source (as in claim 3): yes if A is within {CLOSE_FACTOR:g}x "
    f"and U >= {CHASE_YES:g}x (there is chasing to suppress); partly if U >= {CHASE_PARTLY:g}x "
    f"and ln A <= {1 - SUPPRESS_MIN:g} ln U (the scale loss removes at least {SUPPRESS_MIN:.0%} "
    "of the chasing on a log scale); else no. A yes reached only at a scale loss other than the "
    f"paper's {_setting(*PAPER_ANCHOR)} is graded 'only at a deviation', beside the verdict at "
    "the paper's setting (the same source's sweep point, same criterion).",
)
# claim 5's premise: the paper's gradient decay comes from a softmax saturated by logit chasing of
# the paper's size; chasing more than SIZE_FACTOR below the paper's low end (what claim 3 grades
# "weaker than the paper") does not saturate it so
PREMISE_CHASE = paper.FIG3_CHASING_RATIO[0] / SIZE_FACTOR
GRAD_CRITERION = Criterion(
    f"per weight type, no-final-norm over final-norm gradient norms <= 1/{CLOSE_FACTOR:g} "
    f"(clusters) and All-Taper (+aux) over Internal-Taper (+aux) within {CLOSE_FACTOR:g}x (closes); "
    f"premise: the unanchored no-final-norm end logit norm >= {PREMISE_CHASE:g}x the final-norm "
    "runs' (a softmax saturated as the paper's), else not reproduced at this scale",
    grading=f"A type clusters if the ratio is <= 1/{CLOSE_FACTOR:g} and larger than the spread "
    f"within each group; it closes if within {CLOSE_FACTOR:g}x. Criterion per convention: all "
    "types both yes, none of either no, else partly; the verdict combines the conventions.",
)


# ---- claims 3 and 4: logit chasing and its suppression ---------------------------------------------


@dataclass(frozen=True, eq=False)
class Source:
    """Runs to measure logit norms on, and whether their verdict counts (else context)."""

    name: str
    runs: pd.DataFrame
    judged: bool

    @property
    def tag(self) -> str:
        return "" if self.judged else " [context]"

    @property
    def seeds(self) -> int:
        return int(self.runs["seed"].nunique())

    def detail(self, verdict: str) -> str:
        """The end logit norm of each variant, and the source's verdict."""
        return f"{self.name}: {_variant_means(self.runs, 'logit_norm_end')} ({verdict})"

    def scale(self) -> str:
        return f"{self.name}: {describe_scale(self.runs)}"


def _sources(inp: ClaimInputs) -> list[Source]:
    """The sources to measure logit norms on: the largest main width, and the ablation.

    Prop. 4.2's outward push needs positive margins, so a source is judged only where its runs ended
    with most tokens (>= MARGIN_JUDGED) at a positive margin; the others are reported as context. When
    no source shows its margins, every source is judged (and the comment says so)."""
    out = []
    main = usable_runs(inp.runs)
    if not main.empty:
        width = int(main["width"].max())
        out.append(("main", main[main["width"] == width]))
    ablation = usable_runs(inp.ablation)
    if not ablation.empty:
        out.append(("ablation", ablation))
    judged = [_margin(runs) >= MARGIN_JUDGED for _, runs in out]
    if not any(judged):
        judged = [True] * len(out)
    return [Source(name, runs, j) for (name, runs), j in zip(out, judged, strict=True)]


def _margin(runs: pd.DataFrame) -> float:
    """Mean end fraction of tokens with a positive margin (NaN where it was not logged)."""
    values = runs["margin_pos_frac_end"].dropna() if "margin_pos_frac_end" in runs else []
    return float(values.mean()) if len(values) else math.nan


def _margin_note(name: str, runs: pd.DataFrame, judged: bool) -> str:
    m = _margin(runs)
    where = f"{m:.0%} positive margins at the end" if math.isfinite(m) else "margins not logged"
    return f"{name} ({where}{'' if judged else '; context, not judged'})"


def _variant_means(runs: pd.DataFrame, column: str) -> str:
    means = runs.groupby("variant")[column].mean()
    return ", ".join(f"{variant_label(v)} {means[v]:.3g}" for v in VARIANTS if v in means)


def _diverged_note(inp: ClaimInputs) -> str:
    frames = [r for r in (inp.runs, inp.ablation, inp.sweep) if not r.empty]
    n = sum(int(r["diverged"].sum()) for r in frames)
    named = "; ".join(text for text in map(diverged_text, frames) if text)
    return f" {n} diverged run(s) excluded: {named}." if n else ""


def _free(runs: pd.DataFrame) -> pd.DataFrame:
    """Unanchored runs without a final norm: final norm tapered, no scale loss."""
    return runs[runs["final_taper"] & ~runs["anchor"]]


def _kept(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs keeping a final norm."""
    return runs[~runs["final_taper"]]


def chase_ratio(runs: pd.DataFrame) -> float:
    """Logit chasing (claim 3, and claim 5's premise): the unanchored no-final-norm runs' mean
    end logit norm over the final-norm runs' (NaN where either is missing)."""
    return _free(runs)["logit_norm_end"].mean() / _kept(runs)["logit_norm_end"].mean()


@dataclass(frozen=True, eq=False)
class Chasing:
    """Claim 3 on one source: the unanchored no-final-norm runs' end logit norm over the runs
    keeping a final norm, all together (`ratio`) and per variant (`each`); its plain verdict."""

    source: Source
    ratio: float
    each: pd.Series
    verdict: str


def chase_verdict(least: float, ratio: float) -> str:
    """Claim 3's plain verdict: yes where every unanchored variant's ratio (`least`, the smallest)
    reaches CHASE_YES, partly where theirs together (`ratio`) reaches CHASE_PARTLY, else no."""
    if least >= CHASE_YES:
        return YES
    return PARTLY if ratio >= CHASE_PARTLY else NO


def _chasing(source: Source) -> Chasing | None:
    """Claim 3's measure of `source`; None where it lacks the unanchored or the final-norm runs."""
    runs = source.runs
    free, kept = _free(runs), _kept(runs)
    if free.empty or kept.empty:
        return None
    each = free.groupby("variant")["logit_norm_end"].mean() / kept["logit_norm_end"].mean()
    ratio = chase_ratio(runs)
    return Chasing(source, ratio, each, chase_verdict(each.min(), ratio))


@dataclass(frozen=True, eq=False)
class ChasingClaim:
    """Claim 3 measured: each source's Chasing, and the diverged runs' note."""

    measures: list[Chasing]
    diverged: str

    @property
    def smallest(self) -> Chasing:
        """The judged source with the smallest ratio (what the verdict's size is graded on)."""
        judged = [m for m in self.measures if m.source.judged]
        return min(judged, key=lambda m: (m.ratio, m.source.name))

    @property
    def where(self) -> str:
        return f"{self.smallest.source.name} {self.smallest.ratio:.2f}x"


def measure_chasing(inp: ClaimInputs) -> ChasingClaim | NoVerdict:
    measures = [m for m in map(_chasing, _sources(inp)) if m is not None]
    if not measures:
        return not_measured("no runs with both unanchored variants and a kept final norm")
    return ChasingClaim(measures, _diverged_note(inp))


def judge_chasing(m: ChasingClaim) -> Verdict:
    """The judged sources' verdicts combined, a yes graded by the smallest ratio's size."""
    lo, hi = paper.FIG3_CHASING_RATIO
    verdict = combine_verdicts([c.verdict for c in m.measures if c.source.judged])
    return grade_size(verdict, m.smallest.ratio, lo, m.where, f"{lo}-{hi}x")


def describe_chasing(m: ChasingClaim, holds: Verdict) -> dict:
    measures, smallest, where = m.measures, m.smallest, m.where
    ours = "; ".join(
        f"{c.source.name}: {c.ratio:.2f}x ("
        + ", ".join(f"{variant_label(v)} {r:.2f}x" for v, r in c.each.items())
        + f"){c.source.tag}"
        for c in measures
    )
    lo, hi = paper.FIG3_CHASING_RATIO
    details = "; ".join(c.source.detail(c.verdict) for c in measures)
    notes = "; ".join(_margin_note(s.name, s.runs, s.judged) for s in (c.source for c in measures))
    comment = (
        "End logit norm of unanchored runs without a final norm (Final-/All-Taper, no scale loss) "
        "over runs that keep a real final norm (Baseline, Internal-Taper, Internal-Taper (+aux)); "
        f"{details}. Judged where margins are positive (Prop. 4.2's premise, >= "
        f"{MARGIN_JUDGED:.0%} of tokens): {notes}. {CHASE_CRITERION.grading}" + m.diverged
    )
    scales = " | ".join(c.source.scale() for c in measures)
    row = claim_row(ours, scales, holds, comment)
    numbers = Numbers(
        headline=f"{where} (paper {paper.FIG3_SOURCE.version} ~{lo}-{hi}x)",
        unit="x",
        estimate=smallest.ratio,
        n_seeds=smallest.source.seeds,
        parts=tuple(
            Part(f"{c.source.name}{c.source.tag}", c.ratio, n_seeds=c.source.seeds)
            for c in measures
        ),
    )
    return with_numbers(row, numbers)


def suppression_verdict(ratio: float, chase: float) -> str:
    """Claim 4's plain verdict from A (All-Taper (+aux) over Baseline) and U (unanchored over it)."""
    if 1 / CLOSE_FACTOR <= ratio <= CLOSE_FACTOR and chase >= CHASE_YES:
        return YES
    if (
        chase >= CHASE_PARTLY
        and ratio > 0
        and math.log(ratio) <= (1 - SUPPRESS_MIN) * math.log(chase)
    ):
        return PARTLY
    return NO


@dataclass(frozen=True, eq=False)
class SourceMeasure:
    """Claim 4 on one source: All-Taper (+aux)'s end logit norm (A, `ratio`) and the unanchored
    runs' (U, `chase`), both over Baseline, with the (form, λ) scale losses A was trained at; its
    plain verdict."""

    source: Source
    forms: tuple[tuple[str, float], ...]
    ratio: float
    chase: float
    verdict: str

    @property
    def setting(self) -> str:
        return ", ".join(_setting(f, lam) for f, lam in self.forms)

    @property
    def where(self) -> str:
        return f"{self.source.name} ({self.setting})"


def _suppression(source: Source) -> SourceMeasure | None:
    """Claim 4's measure of `source`; None where it lacks All-Taper (+aux), Baseline or the
    unanchored runs."""
    runs = source.runs
    aux, base, free = (
        runs[runs["variant"] == "all_aux"],
        runs[runs["variant"] == "baseline"],
        _free(runs),
    )
    if aux.empty or base.empty or free.empty:
        return None
    base_norm = base["logit_norm_end"].mean()
    forms = tuple(sorted(set(zip(aux["anchor_form"], aux["anchor_lam"], strict=True))))
    ratio, chase = (
        aux["logit_norm_end"].mean() / base_norm,
        free["logit_norm_end"].mean() / base_norm,
    )
    return SourceMeasure(source, forms, ratio, chase, suppression_verdict(ratio, chase))


def _sweep(inp: ClaimInputs) -> pd.DataFrame | None:
    """The λ sweep's points (anchor_sweep.sweep_points) over the ablation and the sweep runs; None
    where no sweep or no usable ablation is given, or the points cannot be made."""
    if inp.sweep.empty or usable_runs(inp.ablation).empty:
        return None
    from ..studies.anchor_sweep import sweep_points

    try:
        points, _ = sweep_points(pd.concat([inp.ablation, inp.sweep], ignore_index=True))
    except ValueError:
        return None
    return points


def _sweep_summary(points: pd.DataFrame | None) -> str:
    """One sentence on the λ sweep: the ratio at each weight, per form."""
    if points is None:
        return ""
    from ..studies.anchor_sweep import FORM_LABELS

    parts = []
    for form, part in points.groupby("anchor_form"):
        cells = [
            f"λ={p.anchor_lam:g}: " + ("diverged" if p.diverged else f"{p.logit_ratio:.2f}x")
            for p in part.itertuples()
        ]
        parts.append(f"{FORM_LABELS[form]}: {', '.join(cells)}")
    return (
        " λ sweep (All-Taper (+aux) end logit norm over Baseline; table_anchor): "
        + "; ".join(parts)
        + "."
    )


def _at_paper(m: SourceMeasure, points: pd.DataFrame | None) -> tuple[str, float, str] | None:
    """(verdict, A, where) of a source at the paper's scale loss: its own runs where they were
    trained at it, else the ablation's sweep point there (judged against the ablation's unanchored
    runs); None where neither is."""
    if m.forms == (PAPER_ANCHOR,):
        return m.verdict, m.ratio, m.source.name
    if m.source.name != "ablation" or points is None:
        return None
    form, lam = PAPER_ANCHOR
    at = points[(points["anchor_form"] == form) & (points["anchor_lam"] == lam)]
    if at.empty:
        return None
    where = f"{m.source.name}'s sweep point"
    if at["diverged"].all():
        return NO, math.inf, where
    ratio = float(at.loc[~at["diverged"], "logit_ratio"].mean())
    return suppression_verdict(ratio, m.chase), ratio, where


@dataclass(frozen=True, eq=False)
class SuppressionClaim:
    """Claim 4 measured: each source's SourceMeasure, the λ sweep's points (None: no sweep), the
    judged sources at the paper's scale loss (_at_paper: (verdict, A, where) each) and the diverged
    runs' note."""

    measures: list[SourceMeasure]
    points: pd.DataFrame | None
    at_paper: list[tuple[str, float, str]]
    diverged: str

    @property
    def judged(self) -> list[SourceMeasure]:
        return [m for m in self.measures if m.source.judged]


def measure_suppression(inp: ClaimInputs) -> SuppressionClaim | NoVerdict:
    measures = [m for m in map(_suppression, _sources(inp)) if m is not None]
    if not measures:
        return not_measured("no runs with all_aux, baseline and final/all")
    points = _sweep(inp)
    judged = [m for m in measures if m.source.judged]
    at_paper = [a for a in (_at_paper(m, points) for m in judged) if a is not None]
    return SuppressionClaim(measures, points, at_paper, _diverged_note(inp))


def judge_suppression(m: SuppressionClaim) -> Verdict:
    """The judged sources' verdicts combined, graded by the verdict at the paper's setting."""
    deviations = [j.setting for j in m.judged if j.forms != (PAPER_ANCHOR,)]
    return _graded_at_paper(combine_verdicts([j.verdict for j in m.judged]), deviations, m.at_paper)


def describe_suppression(m: SuppressionClaim, holds: Verdict) -> dict:
    ours = "; ".join(
        f"{s.where}: {s.ratio:.2f}x baseline (unanchored {s.chase:.2f}x){s.source.tag}"
        for s in m.measures
    )
    scales = " | ".join(s.source.scale() for s in m.measures)
    row = claim_row(ours, scales, holds, _suppression_comment(m))
    return with_numbers(row, _suppression_numbers(m.measures))


def _graded_at_paper(
    holds: str, deviations: list[str], at_paper: list[tuple[str, float, str]]
) -> Verdict:
    """Claim 4's verdict: a yes reached only at scale losses other than the paper's (`deviations`)
    is graded 'only at a deviation', beside the verdict at the paper's setting (`at_paper`: its
    (verdict, A, where) per judged source)."""
    if holds != YES or not deviations:
        return plain(holds)
    paper_setting = _setting(*PAPER_ANCHOR)
    if not at_paper:
        return at_deviation(", ".join(deviations), paper_setting, NOT_MEASURED)
    paper_verdict = combine_verdicts([v for v, *_ in at_paper])
    if paper_verdict == YES:
        return plain(holds)
    worst = max(a for _, a, _ in at_paper)
    return at_deviation(
        ", ".join(deviations), paper_setting, f"{paper_verdict}, {worst:.2f}x the baseline"
    )


def _suppression_comment(m: SuppressionClaim) -> str:
    """Claim 4's comment: the end logit norms per source, the criterion, the paper's setting, the
    λ sweep."""
    paper_setting = _setting(*PAPER_ANCHOR)
    details = "; ".join(s.source.detail(s.verdict) for s in m.measures)
    there = ""
    if m.at_paper:
        there = "; ".join(f"{where}: A {a:.2f}x ({v})" for v, a, where in m.at_paper)
        there = f" At the paper's {paper_setting}, judged sources: {there}."
    return (
        f"End logit norm of All-Taper (+aux) (A) and of the unanchored Final/All-Taper runs (U), "
        f"both over Baseline; {details}. {SUPPRESS_CRITERION.grading}"
        + there
        + _sweep_summary(m.points)
        + " Eq. 5's restoring stiffness on ln r is λ·s_tgt² (Prop. 4.3), so the paper's λ holds a "
        "small residual stream loosely; the relative form's is λ at any scale." + m.diverged
    )


def _suppression_numbers(measures: list[SourceMeasure]) -> Numbers:
    """Claim 4's number: A of the judged source farthest from the baseline (ties: the larger A,
    then U), each source's A and U as parts."""
    parts = []
    for m in measures:
        name, tag, seeds = m.source.name, m.source.tag, m.source.seeds
        parts += [
            Part(f"{m.where}: A, All-Taper (+aux) / Baseline{tag}", m.ratio, n_seeds=seeds),
            Part(f"{name}: U, unanchored / Baseline{tag}", m.chase, n_seeds=seeds),
        ]
    judged = [m for m in measures if m.source.judged]
    if not judged:
        why = "no judged source"
        return Numbers(why, "x", no_estimate=why, parts=tuple(parts))
    far = max(judged, key=lambda m: (abs(math.log(m.ratio)), m.ratio, m.chase))
    return Numbers(
        headline=f"{far.where}: {far.ratio:.2f}x baseline (unanchored {far.chase:.2f}x)",
        unit="x",
        estimate=far.ratio,
        n_seeds=far.source.seeds,
        parts=tuple(parts),
    )


# ---- claim 5: gradient norms cluster by final-norm presence -----------------------------------------

GRAD_NEEDED = ("baseline", "internal", "final", "all", "internal_aux", "all_aux")


@dataclass(frozen=True)
class GradVerdict:
    """Claim 5 in one clipping convention (`label`): the verdict, the comment's text and the Ours
    cell's short one, how many of the `n_types` weight types have larger no-final-norm gradients,
    and each type's two ratios as (label, ratio)."""

    label: str
    verdict: str
    text: str
    short: str
    n_larger: int
    n_types: int
    ratios: tuple[tuple[str, float], ...]


def _grad_verdict(label: str, means: pd.DataFrame, columns: Sequence[str]) -> GradVerdict:
    """Claim 5's verdict on the end gradient `means` of the weight types `columns`."""
    seps, closes, n_cluster, n_close, n_larger, s_all, c_all = [], [], 0, 0, 0, [], []
    parts = []
    for c in columns:
        g = means[f"{c}_end"]
        sep, close = gradient_ratios(g)
        spread = max(
            abs(math.log(g["final"] / g["all"])), abs(math.log(g["baseline"] / g["internal"]))
        )
        s_all.append(sep)
        c_all.append(close)
        clusters = sep <= 1 / CLOSE_FACTOR and abs(math.log(sep)) > spread
        closed = 1 / CLOSE_FACTOR <= close <= CLOSE_FACTOR
        n_cluster, n_close, n_larger = n_cluster + clusters, n_close + closed, n_larger + (sep > 1)
        short = c.removeprefix("grad_").removesuffix("_clipped")
        seps.append(f"{short} {sep:.2f}x{'' if clusters else ' (no cluster)'}")
        closes.append(f"{short} {close:.2f}x{'' if closed else ' (not closed)'}")
        parts += [(f"{short}: no-final/final-norm", sep), (f"{short}: all_aux/internal_aux", close)]
    n = len(columns)
    if n_cluster == n and n_close == n:
        verdict = "yes"
    elif n_cluster == 0 or n_close == 0:
        verdict = "no"
    else:
        verdict = "partly"
    text = (
        f"no-final/final-norm {', '.join(seps)}; all_aux/internal_aux {', '.join(closes)} "
        f"({n_cluster}/{n} cluster, {n_close}/{n} close: {verdict})"
    )
    short = (
        f"no-final/final-norm {min(s_all):.2f}-{max(s_all):.2f}x, All-Taper (+aux)/Internal-Taper "
        f"(+aux) {min(c_all):.2f}-{max(c_all):.2f}x ({verdict})"
    )
    return GradVerdict(label, verdict, text, short, n_larger, n, tuple(parts))


def _grad_source(inp: ClaimInputs) -> Source | None:
    """The judged source with all six variants: the positive-margin family first (claim 3's rule)."""
    found = [s for s in _sources(inp) if set(GRAD_NEEDED) <= set(s.runs["variant"])]
    if not found:
        return None
    return min(found, key=lambda s: not s.judged)  # judged sources first, then in source order


def claim5_premise(runs: pd.DataFrame, verdict: str) -> tuple[Verdict, str]:
    """(verdict, the comment's sentence) of claim 5 after its premise check: a verdict other
    than yes where the unanchored no-final-norm runs' end logit norm is below PREMISE_CHASE times
    the final-norm runs' (the softmax is not saturated as the paper's) is "not reproduced at this
    scale", with the criterion's verdict beside it; otherwise the verdict stands."""
    chase = chase_ratio(runs)
    lo, hi = paper.FIG3_CHASING_RATIO
    if not math.isfinite(chase):
        return plain(verdict), " Premise not measured (no end logit norms)."
    measured = (
        f"unanchored no-final-norm end logit norm {chase:.2f}x the final-norm runs' (the paper's "
        f"~{lo}-{hi}x; a softmax saturated as the paper's needs >= {PREMISE_CHASE:g}x)"
    )
    note = (
        f" Premise (the paper's decay needs a softmax saturated by logit chasing of the paper's "
        f"size: >= its {lo}x / {SIZE_FACTOR:g}): {measured}"
    )
    if verdict != YES and chase < PREMISE_CHASE:
        note += "; absent, so a verdict other than yes is 'not reproduced at this scale'."
        return not_reproduced(measured, verdict), note
    return plain(verdict), note + "; present."


@dataclass(frozen=True, eq=False)
class GradientClaim:
    """Claim 5 measured on its source: the variants' end means of every logged `*_end` column,
    each clipping convention's ratios (and per-convention verdicts: _grad_verdict), the diverged
    runs' note."""

    source: Source
    means: pd.DataFrame
    conventions: list[GradVerdict]
    diverged: str


def measure_gradients(inp: ClaimInputs) -> GradientClaim | NoVerdict:
    found = _grad_source(inp)
    if found is None:
        why = f"no source with non-diverged runs of every variant {GRAD_NEEDED}"
        given = [r for r in (inp.runs, inp.ablation) if not r.empty and "variant" in r]
        if not any(set(GRAD_NEEDED) <= set(r["variant"]) for r in given):
            return not_measured(why)
        # every variant ran, but in no source did each have a run that finished
        return NoVerdict("—", "—", not_judged(why), _diverged_note(inp).strip())
    runs = found.runs
    means = runs.groupby("variant")[[c for c in runs.columns if c.endswith("_end")]].mean()
    conventions = [("before clipping", GRAD_COLUMNS)]
    if means[[f"{c}_end" for c in CLIPPED_COLUMNS]].notna().all().all():
        conventions.append(("after clipping", CLIPPED_COLUMNS))
    judged = [_grad_verdict(label, means, columns) for label, columns in conventions]
    return GradientClaim(found, means, judged, _diverged_note(inp))


def _premise(m: GradientClaim) -> tuple[Verdict, str]:
    return claim5_premise(m.source.runs, combine_verdicts([j.verdict for j in m.conventions]))


def judge_gradients(m: GradientClaim) -> Verdict:
    """The conventions' verdicts combined, then the premise check (claim5_premise)."""
    return _premise(m)[0]


def describe_gradients(m: GradientClaim, holds: Verdict) -> dict:
    name, runs, means, judged = m.source.name, m.source.runs, m.means, m.conventions
    seeds = m.source.seeds
    texts = "; ".join(f"{j.label}: {j.text}" for j in judged)
    larger = ", ".join(f"{j.n_larger}/{j.n_types} {j.label}" for j in judged)
    sat = means["saturation_end"] if "saturation_end" in means else pd.Series(dtype=float)
    saturation = ""
    if sat.notna().all() and len(sat):
        free, kept = sat[["final", "all"]].mean(), sat[["baseline", "internal"]].mean()
        saturation = (
            f" Softmax saturation mean ||softmax(z) - onehot(y)|| at the end: {free:.3f} without "
            f"a final norm vs {kept:.3f} with one (the CE gradient w.r.t. the logits; the paper's "
            "decay needs the first far below the second)."
        )
    comment = (
        f"End gradient norms (mean over the last 10% of logged steps, averaged over blocks) of the "
        f"{_margin_note(name, runs, True)} family, in each convention: {texts}. Types "
        f"where the no-final-norm gradients are larger (the opposite of the paper's direction): "
        f"{larger}. {GRAD_CRITERION.grading}" + saturation + m.diverged
    )
    ours = f"{name}, " + "; ".join(f"{j.label}: {j.short}" for j in judged)
    row = claim_row(ours, describe_scale(runs), holds, comment + _premise(m)[1])
    numbers = Numbers(
        headline=ours,
        unit="x",
        n_seeds=seeds,
        no_estimate="one ratio per weight type and clipping convention, two per type (parts): "
        "no single headline number",
        parts=tuple(
            Part(f"{name}, {j.label}, {what}", r, n_seeds=seeds)
            for j in judged
            for what, r in j.ratios
        ),
    )
    return with_numbers(row, numbers)
