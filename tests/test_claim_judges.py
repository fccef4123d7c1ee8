"""Each claim's judge on typed measurements: its grade, not its sentences (the rendered rows have
their own tests)."""

import dataclasses
import math
from pathlib import Path

import pytest

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.fold import FoldChecks, judge_exact
from tapernorm.analysis.claims.loss import WidthGap, judge_gaps, width_verdict
from tapernorm.analysis.claims.rows import (
    AT_DEVIATION,
    NO,
    NOT_MEASURED,
    NOT_RESOLVED,
    PARTLY,
    UNLIKE,
    YES,
    ClaimInputs,
    NoVerdict,
    plain,
)
from tapernorm.analysis.stats import PairedGap


def _at(width: int, mean: float, lo: float, hi: float, n: int = 3, **kw) -> WidthGap:
    per_seed = {s: mean for s in range(n)}
    gap = PairedGap("internal_aux", "baseline", width, per_seed, mean, lo, hi)
    return WidthGap(gap=gap, n_diverged=kw.pop("n_diverged", 0), all_diverged=False, **kw)


@pytest.mark.parametrize(
    "widths, grade",
    [
        ([_at(32, 0.5, 0.1, 0.9), _at(64, 1.0, 0.4, 1.6)], YES),
        ([_at(32, 0.5, 0.1, 0.9), _at(64, 1.5, 0.5, 2.5)], NOT_RESOLVED),  # straddles +2%
        ([_at(32, 0.5, 0.1, 0.9), _at(64, 3.0, 2.5, 3.5)], PARTLY),  # one width wholly above
        ([_at(32, 3.0, 2.5, 3.5), _at(64, -3.0, -3.5, -2.5)], NO),  # above, and below -2%
        ([_at(32, -1.0, -1.5, -0.5), _at(64, -0.5, -0.9, -0.1)], UNLIKE),  # inside, below 0
        ([_at(32, 0.5, 0.1, 0.9, blown="Baseline seed 1: a loss spike")], PARTLY),
        ([_at(32, 0.5, math.nan, math.nan, n=1)], NOT_RESOLVED),  # one pair: no interval
    ],
)
def test_the_loss_claims_judge_grades_the_widths(widths, grade):
    assert judge_gaps(widths, "+0.32% to +1.86%").grade == grade


def test_a_width_where_every_run_diverged_is_a_no_whatever_its_gap():
    diverged = WidthGap(
        gap=PairedGap("internal_aux", "baseline", 64, {}, math.nan, math.nan, math.nan),
        n_diverged=3,
        all_diverged=True,
    )
    assert width_verdict(diverged)[0] == NO
    assert judge_gaps([_at(32, 0.5, 0.1, 0.9), diverged], "").grade == PARTLY


@pytest.mark.parametrize(
    "failed, worst, rtols, grade",
    [
        (False, 3e-7, [1e-5], YES),
        (True, 3e-7, [1e-5], NO),  # a failed check is a no, however small the difference
        (False, 4e-4, [1e-3], AT_DEVIATION),  # exact only to the looser rtol the checks ran at
    ],
)
def test_claim_6s_judge_grades_the_fold_checks(failed, worst, rtols, grade):
    assert judge_exact(failed, worst, rtols).grade == grade


def test_every_claims_measure_says_not_measured_without_its_inputs():
    for number, claim in enumerate(claims.CLAIMS, 1):
        measured = claim.measure(ClaimInputs())
        assert isinstance(measured, NoVerdict), claim.title(number)
        assert measured.holds.grade == NOT_MEASURED
        assert claim.cells(ClaimInputs())["grade"] == NOT_MEASURED


def _verify(model: str, rel: float, ok: bool = True) -> tuple[Path, dict]:
    check = {"rel_logit_diff": rel, "loss_diff": rel, "ok": ok, "rtol": 1e-5}
    return Path(f"{model}/verify.json"), {"model": model, "folded": check, "scaled": check}


def test_a_claims_grade_is_its_declared_judges_verdict_on_its_measure():
    """Claim 6 measured on two folds: its judge grades the typed checks; another judge in the
    declaration changes the grade and nothing that describe writes from the numbers."""
    claim = claims.CLAIMS[5]
    inp = ClaimInputs(verify=[_verify("a", 3e-7), _verify("b", 2e-7)])
    measured = claim.measure(inp)
    assert isinstance(measured, FoldChecks)
    assert measured.worst == 3e-7 and measured.failed == [] and len(measured.checks) == 4
    row = claim.cells(inp)
    assert row["grade"] == YES and row["Holds?"] == "yes"
    swapped = dataclasses.replace(claim, judge=lambda m: plain(NO))
    other = swapped.cells(inp)
    assert other["grade"] == NO
    assert {k: other[k] for k in ("Ours", "Scale")} == {k: row[k] for k in ("Ours", "Scale")}
    failed = ClaimInputs(verify=[_verify("a", 3e-7), _verify("b", 2e-7, ok=False)])
    assert claim.measure(failed).failed == ["b/folded", "b/scaled"]
    assert claim.cells(failed)["grade"] == NO
