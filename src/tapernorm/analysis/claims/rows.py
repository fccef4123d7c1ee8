"""What every claim of results/claims.md is computed from (ClaimInputs) and returns (a row of
COLUMNS), the graded verdicts of its "Holds?" column, and the helpers the claims share to judge runs.

The "Holds?" column is one of these grades; all but the plain ones carry their evidence in brackets,
built from the data by the claim (never typed in):

- "yes": the claim's criterion holds at the paper's settings, with a size comparable to the paper's.
- "yes, weaker than the paper (ours vs the paper's)": it holds at the paper's settings, but the
  effect is more than SIZE_FACTOR below the low end of the paper's range (weaker_than_paper).
- "yes, unlike the paper (ours vs the paper's)": the criterion holds, but the value lies on the other
  side of the paper's range by more than the seed spread, e.g. below the baseline where the paper
  has a small increase (unlike_paper).
- "only at a deviation (the setting; at the paper's setting: its verdict)": the criterion holds only
  at a setting the paper did not use, named, beside the verdict at the paper's own (at_deviation).
- "partly": some of the criterion's parts (widths, sources, benchmarks, cells) hold, not all.
- "no": none holds.
- "not reproduced at this scale (the premise measured; by the criterion: its verdict)": the claim
  does not hold here and the paper's premise for it (what its effect depends on) is measured absent
  at our scale, so the data neither confirm nor refute it (not_reproduced).
- "not resolved (why)": the measurement cannot tell: its 95% interval straddles the criterion's
  edge, or the spread of repeated timings spans "no difference" (the reason in brackets).
- "not measured": the inputs for the claim were not given.
- "not judged: why": the inputs were given but cannot support a verdict (e.g. disturbed timing).

A claim first reaches a plain verdict (yes / partly / no) by its criterion, then grades a "yes" by
setting and size with the functions below. Each returns a Verdict: the grade and the cell showing it
are made together, so no grade is ever read back from text."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...variants import VARIANTS

YES, PARTLY, NO = "yes", "partly", "no"
NOT_MEASURED = "not measured"
NOT_JUDGED = "not judged"
NOT_RESOLVED = "not resolved"
NOT_REPRODUCED = "not reproduced at this scale"
WEAKER = "yes, weaker than the paper"
UNLIKE = "yes, unlike the paper"
AT_DEVIATION = "only at a deviation"
GRADES = (
    YES, WEAKER, UNLIKE, AT_DEVIATION, PARTLY, NO, NOT_REPRODUCED, NOT_RESOLVED, NOT_MEASURED,
    NOT_JUDGED,
)  # fmt: skip
# each grade's colour in the HTML pages (analysis.html.STYLE's td classes): a plain yes or no, any
# qualified verdict, or no verdict at all
GRADE_CLASS = {
    YES: "yes", WEAKER: "mixed", UNLIKE: "mixed", AT_DEVIATION: "mixed", PARTLY: "mixed", NO: "no",
    NOT_REPRODUCED: "unjudged", NOT_RESOLVED: "unjudged", NOT_MEASURED: "unjudged",
    NOT_JUDGED: "unjudged",
}  # fmt: skip
SIZE_FACTOR = 2.0  # "weaker": the effect is below the low end of the paper's range / SIZE_FACTOR
COLUMNS = ("Claim", "Paper", "Ours", "Scale", "Holds?", "Comment")


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict: its grade (one of GRADES) and the "Holds?" cell showing it with its
    evidence."""

    grade: str
    text: str

    def __post_init__(self) -> None:
        if self.grade not in GRADES:
            raise ValueError(f"not a grade: {self.grade!r} (one of {', '.join(GRADES)})")

    def noted(self, note: str) -> Verdict:
        """The same grade, its cell followed by `note` (e.g. a second host's verdict)."""
        return Verdict(self.grade, f"{self.text}; {note}")


def plain(grade: str) -> Verdict:
    """A verdict shown as its grade alone."""
    return Verdict(grade, grade)


def because(grade: str, why: str) -> Verdict:
    """e.g. "not resolved (95% interval [-0.1%, +2.4%] straddles ±2%)"."""
    return Verdict(grade, f"{grade} ({why})")


@dataclass
class ClaimInputs:
    """Everything claims are computed from; empty frames / lists mean 'not given'."""

    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    ablation: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)  # anchor_sweep runs (claim 4)
    verify: list[tuple[Path, dict]] = field(default_factory=list)
    finetune: pd.DataFrame = field(default_factory=pd.DataFrame)  # finetune.load_finetune_evals
    bench: pd.DataFrame = field(default_factory=pd.DataFrame)  # the timed rows of load_bench
    bench_skipped: list[str] = field(default_factory=list)  # why a benchmarked model was not timed
    # other runs' timed rows, (name, rows) each, pooled by the speed rule with `bench` (speed_rule)
    bench_pool: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    lr_grid: dict | None = None  # lr_grid.json of `tapernorm lr-grid` (the TaperNorm-vs-DyT row)
    scaling: pd.DataFrame | None = None  # summary.csv of the scaling study (claims.scaling)
    stability: pd.DataFrame | None = None  # summary.csv of the stability study (claims.stability)
    gpu: pd.DataFrame | None = None  # a first-GPU check's timed rows (gpu_report.gpu_bench)
    gpu_where: str = ""  # its device, dtype and directory


MEASURED = COLUMNS[2:]  # the cells a claim's measure fills (its declaration: Claim and Paper)


def claim_row(ours: str, scale: str, holds: Verdict, comment: str) -> dict:
    """What a claim's measure returns: its cells of MEASURED, "Holds?" the verdict's cell, and the
    verdict's grade under "grade" (the declaration, claims.document.Claim, adds Claim and Paper)."""
    cells = (ours, scale, holds.text, comment)
    return {**dict(zip(MEASURED, cells, strict=True)), "grade": holds.grade}


@dataclass(frozen=True)
class NoVerdict:
    """What a claim's measure returns where its inputs allow no verdict: the cells shown instead
    (not measured: the inputs were not given; not judged: they cannot support one)."""

    ours: str
    scale: str
    holds: Verdict
    comment: str

    def row(self) -> dict:
        return claim_row(self.ours, self.scale, self.holds, self.comment)


def not_measured(why: str) -> NoVerdict:
    return NoVerdict(NOT_MEASURED, "—", plain(NOT_MEASURED), why)


def not_judged(why: str) -> Verdict:
    return Verdict(NOT_JUDGED, f"{NOT_JUDGED}: {why}")


def combine_verdicts(verdicts: list[str]) -> str:
    """Plain verdicts of a claim's parts combined: yes if all yes, no if all no, else partly."""
    if all(v == YES for v in verdicts):
        return YES
    if all(v == NO for v in verdicts):
        return NO
    return PARTLY


def weaker_than_paper(ours: str, paper_value: str) -> Verdict:
    return because(WEAKER, f"{ours} vs the paper's {paper_value}")


def unlike_paper(ours: str, paper_value: str) -> Verdict:
    return because(UNLIKE, f"{ours} vs the paper's {paper_value}")


def not_reproduced(premise: str, verdict: str) -> Verdict:
    """e.g. "not reproduced at this scale (premise absent: ...; by the criterion: no)"."""
    return because(NOT_REPRODUCED, f"premise absent: {premise}; by the criterion: {verdict}")


def at_deviation(deviation: str, paper_setting: str, verdict_there: str) -> Verdict:
    """e.g. "only at a deviation (Eq. 5 λ=10; at the paper's λ=0.1: no, 2.59x)"."""
    return because(AT_DEVIATION, f"{deviation}; at the paper's {paper_setting}: {verdict_there}")


def grade_size(verdict: str, size: float, paper_low: float, ours: str, paper_value: str) -> Verdict:
    """A plain "yes" whose effect `size` (a ratio > 1, as the paper's) is more than SIZE_FACTOR below
    the paper's low end `paper_low` becomes "yes, weaker than the paper"; other verdicts pass."""
    if verdict == YES and size < paper_low / SIZE_FACTOR:
        return weaker_than_paper(ours, paper_value)
    return plain(verdict)


def usable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with a Table 1 variant that did not diverge."""
    if runs.empty:
        return runs
    return runs[runs["variant"].notna() & ~runs["diverged"]]


def variant_label(variant: str) -> str:
    return VARIANTS[variant]["label"]
