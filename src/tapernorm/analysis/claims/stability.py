"""The paper's stability claim: the taper "enables stable training", Internal-Taper (+aux) "the most
stable and reliable across seeds". Judged on how many runs of each tapered arm finished clean (no
blow-up: training/blowups.py, a non-finite loss or gradient or a finite spike) against the
baseline's, at each width: the clean rate k/n with its exact 95% Clopper-Pearson interval and the
two-sided Fisher exact p against the baseline (rates.py, analysis/studies/stability.py).

Sources: the committed stability study's summary (results/cpu/stability/summary.csv: 12 runs per arm
and width, init seeds crossed with data orders) where the checkout has it, and the default
pipeline's own pretrain runs (a few seeds per arm). The verdict is judged on the study where it is
given, else on the pretrain runs; the other source is shown beside it as context.

Judged per width (`width_verdict`) over the paper's tapered arms present (Internal-, Final-,
All-Taper, each with or without the scale loss), "not resolved" where the intervals are too wide to
tell (too few runs); widths combine strictly, since one width where the taper does not train stably
is enough: STABILITY_CRITERION and its grading. Whether Internal-Taper (+aux) is the most stable is
said in the comment: its clean rate against each other tapered arm's, with Fisher's p.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...variants import PAPER_VARIANTS
from ..rates import fisher_exact
from ..runs import describe_scale
from ..studies.stability import COLUMNS, rate_rows
from .numbers import Criterion, Numbers, Part, with_numbers
from .rows import (
    NO,
    NOT_RESOLVED,
    YES,
    ClaimInputs,
    NoVerdict,
    Verdict,
    because,
    claim_row,
    not_measured,
    plain,
)

ALPHA = 0.05  # Fisher's p below which a clean rate is significantly below the baseline's
CLEAN_MIN = 0.7  # an informative interval: its lower end at least this (with 12/12 clean: 0.74)
CLEAN_RATES = (
    f"at every width, no tapered arm's clean rate (runs without a blow-up) is below the baseline's "
    f"with two-sided Fisher p < {ALPHA:g}, and every tapered arm's 95% Clopper-Pearson interval "
    f"has its lower end at or above {CLEAN_MIN:g}"
)
STABILITY_CRITERION = Criterion(
    CLEAN_RATES,
    grading=f"Criterion: {CLEAN_RATES}; widths combine strictly (no if any width is no, else not "
    "resolved if any is, else yes). A blow-up: a non-finite loss or gradient, or a finite spike "
    "(training/blowups.py).",
)
STUDY = "stability study"


def load_stability(path: str | Path) -> pd.DataFrame:
    """summary.csv of `tapernorm stability summary`, with its path kept in attrs["source"]."""
    frame = pd.read_csv(path, keep_default_na=True)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"stability summary {path}: not a summary.csv (no columns {missing})")
    for column in ("against", "against_clean", "first_blowups", "blew_up"):
        frame[column] = frame[column].fillna("")
    frame.attrs["source"] = str(Path(path).parent)
    return frame


def _tapered(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["arm"].isin(PAPER_VARIANTS) & (rows["against"] == "baseline")]


def _rate(r: dict) -> str:
    return f"{r['n_clean']}/{r['n_runs']} [{r['clean_ci_low']:.2f}, {r['clean_ci_high']:.2f}]"


def width_verdict(rows: pd.DataFrame, width: int) -> tuple[str, str]:
    """(yes | no | not resolved, why) at one width of a source's rows."""
    at = rows[rows["width"] == width]
    arms = _tapered(at).to_dict("records")
    base = at[at["arm"] == "baseline"].iloc[0]
    below = [
        r
        for r in arms
        if r["fisher_p"] < ALPHA and r["clean_rate"] < base["clean_rate"]  # (NaN: False)
    ]
    if below:
        names = ", ".join(f"{r['label']} {_rate(r)}, p={r['fisher_p']:.3g}" for r in below)
        return NO, f"d={width}: below the baseline's {_rate(base)}: {names}"
    wide = [r for r in arms if r["clean_ci_low"] < CLEAN_MIN]
    if wide:
        names = ", ".join(f"{r['label']} {_rate(r)}" for r in wide)
        return NOT_RESOLVED, (
            f"d={width}: no arm significantly below the baseline's {_rate(base)}, but intervals "
            f"too wide to tell (lower end below {CLEAN_MIN:g}): {names}"
        )
    return YES, f"d={width}: every tapered arm clean in at least {CLEAN_MIN:g} of runs (95%)"


def source_text(rows: pd.DataFrame, name: str) -> str:
    """'stability study: d=32: Internal-Taper (+aux) 9/12 [0.46, 0.95] (p=0.22), ...; Baseline
    12/12 [...]' of a source."""
    parts = []
    for width in sorted(rows["width"].unique()):
        at = rows[rows["width"] == width]
        base = at[at["arm"] == "baseline"]
        arms = [
            f"{r['label']} {_rate(r)} (p={r['fisher_p']:.3g})"
            for r in _tapered(at).to_dict("records")
        ]
        b = f"; Baseline {_rate(base.iloc[0])}" if len(base) else ""
        parts.append(f"d={width}: {', '.join(arms)}{b}")
    return f"{name}: runs clean [95% CP] (Fisher p vs Baseline): " + " | ".join(parts)


def most_stable_note(rows: pd.DataFrame) -> str:
    """Internal-Taper (+aux)'s clean rate against each other tapered arm's, per width."""
    notes = []
    for width in sorted(rows["width"].unique()):
        arms = {r["arm"]: r for r in _tapered(rows[rows["width"] == width]).to_dict("records")}
        if "internal_aux" not in arms or len(arms) < 2:
            continue
        mine = arms.pop("internal_aux")
        vs = []
        for other in arms.values():
            p = fisher_exact(
                mine["n_clean"],
                mine["n_blowup"],
                other["n_clean"],
                other["n_blowup"],
            )
            vs.append(f"{other['label']} {other['n_clean']}/{other['n_runs']} (p={p:.3g})")
        top = all(mine["clean_rate"] >= o["clean_rate"] for o in arms.values())
        notes.append(
            f"d={width}: Internal-Taper (+aux) {mine['n_clean']}/{mine['n_runs']} clean vs "
            f"{', '.join(vs)}: {'the highest or tied' if top else 'not the highest'}"
        )
    return "; ".join(notes)


def combine_strictly(verdicts: list[str]) -> str:
    """Per-width verdicts combined: no if any is no, else not resolved if any is, else yes."""
    for verdict in (NO, NOT_RESOLVED):
        if verdict in verdicts:
            return verdict
    return YES


def _judgeable(rows: pd.DataFrame) -> list[int]:
    """The widths with a baseline and at least one tapered arm."""
    return [
        int(w)
        for w in sorted(rows["width"].unique())
        if (rows[rows["width"] == w]["arm"] == "baseline").any()
        and len(_tapered(rows[rows["width"] == w]))
    ]


@dataclass(frozen=True, eq=False)
class StabilityClaim:
    """The stability row measured: its sources' clean-rate rows ((name, rows) each: the study's,
    the pretrain runs'), the first of them (`name`, `judged`) and its widths with a baseline and
    a tapered arm, and the pretrain runs of the paper's variants."""

    sources: list[tuple[str, pd.DataFrame]]
    name: str
    judged: pd.DataFrame
    widths: list[int]
    paper_runs: pd.DataFrame

    def per_width(self) -> list[tuple[str, str]]:
        """(yes | no | not resolved, why) at each width (width_verdict)."""
        return [width_verdict(self.judged, w) for w in self.widths]


def measure_stability(inp: ClaimInputs) -> StabilityClaim | NoVerdict:
    study = inp.stability if inp.stability is not None and not inp.stability.empty else None
    own, paper_runs = None, pd.DataFrame()
    if not inp.runs.empty:
        paper_runs = inp.runs[inp.runs["variant"].isin(PAPER_VARIANTS)]
        own = rate_rows(paper_runs) if len(paper_runs) else None
    sources = [(STUDY, study), ("pretrain runs", own)]
    sources = [(n, s) for n, s in sources if s is not None and _judgeable(s)]
    if not sources:
        return not_measured("no runs of a tapered arm beside the baseline given")
    name, judged = sources[0]
    return StabilityClaim(sources, name, judged, _judgeable(judged), paper_runs)


def judge_stability(m: StabilityClaim) -> Verdict:
    """The widths combined strictly; a no or not resolved with the widths that made it."""
    verdicts, reasons = zip(*m.per_width(), strict=True)
    grade = combine_strictly(list(verdicts))
    if grade in (NO, NOT_RESOLVED):
        shown = [r for r, v in zip(reasons, verdicts, strict=True) if v == grade]
        return because(grade, "; ".join(shown))
    return plain(grade)


def describe_stability(m: StabilityClaim, holds: Verdict) -> dict:
    name, judged, widths = m.name, m.judged, m.widths
    reasons = [why for _, why in m.per_width()]
    ours = "; ".join(source_text(rows, n) for n, rows in m.sources)
    where = judged.attrs.get("source", "") if name == STUDY else ""
    scale = (
        f"{STUDY} ({where}): {', '.join(f'd={w}' for w in widths)}; "
        f"{int(judged['steps'].max()):,} steps; {int(judged['n_runs'].max())} runs per arm"
        if name == STUDY
        else describe_scale(m.paper_runs)
    )
    comment = (
        f"Judged on the {name}{' (the pretrain runs as context)' if len(m.sources) > 1 else ''}: "
        f"{'; '.join(reasons)}. {STABILITY_CRITERION.grading}"
    )
    if note := most_stable_note(judged):
        comment += f" Most stable? {note}."
    row = claim_row(ours, scale, holds, comment)
    return with_numbers(row, _numbers(judged, widths, name))


def _numbers(rows: pd.DataFrame, widths: list[int], name: str) -> Numbers:
    """The lowest clean rate of a tapered arm at the largest width as the headline; every tapered
    arm at every width as a part."""
    arms = _tapered(rows[rows["width"].isin(widths)]).to_dict("records")
    last = min(
        (r for r in arms if r["width"] == widths[-1]), key=lambda r: (r["clean_rate"], r["arm"])
    )
    base = rows[(rows["width"] == widths[-1]) & (rows["arm"] == "baseline")].iloc[0]
    return Numbers(
        headline=f"{name}, d={widths[-1]}: {last['label']} {last['n_clean']}/{last['n_runs']} "
        f"clean vs Baseline {base['n_clean']}/{base['n_runs']}",
        unit="clean rate",
        estimate=float(last["clean_rate"]),
        ci_low=float(last["clean_ci_low"]),
        ci_high=float(last["clean_ci_high"]),
        interval="95% Clopper-Pearson interval of the clean rate",
        n_seeds=int(last["n_runs"]),
        parts=tuple(
            Part(
                f"d={r['width']}: {r['label']} clean rate ({name})",
                float(r["clean_rate"]),
                float(r["clean_ci_low"]),
                float(r["clean_ci_high"]),
                int(r["n_runs"]),
                None,
                r["arm"],
            )
            for r in arms
        ),
    )
