"""Claim 5's premise check: where the paper's premise (a softmax saturated by logit chasing of the
paper's size) is measured absent, a verdict other than yes is "not reproduced at this scale", with
the criterion's verdict beside it; where it is present, the verdict stands."""

import pandas as pd
import pytest

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.chasing import (
    PREMISE_CHASE,
    GradientClaim,
    GradVerdict,
    Source,
    claim5_premise,
)
from tapernorm.analysis.claims.rows import NO, NOT_REPRODUCED, PARTLY, YES, plain


def _runs(chase: float) -> pd.DataFrame:
    """Baseline and Internal-Taper keep a final norm (logit norm 10); Final- and All-Taper, no
    anchor, end at `chase` times that; All-Taper (+aux) is anchored."""
    rows = [
        ("baseline", False, False, 10.0),
        ("internal", False, False, 10.0),
        ("final", True, False, 10.0 * chase),
        ("all", True, False, 10.0 * chase),
        ("all_aux", True, True, 10.0),
    ]
    return pd.DataFrame(rows, columns=["variant", "final_taper", "anchor", "logit_norm_end"])


def test_the_premise_threshold_is_the_papers_chasing_over_the_size_factor():
    assert PREMISE_CHASE == pytest.approx(20 / 2)  # Fig. 3's 20x low end / SIZE_FACTOR


@pytest.mark.parametrize("verdict", [NO, PARTLY])
def test_a_claim_5_without_its_premise_is_not_reproduced_at_this_scale(verdict):
    holds, note = claim5_premise(_runs(2.75), verdict)
    assert holds.grade == NOT_REPRODUCED
    assert holds.text == (
        "not reproduced at this scale (premise absent: unanchored no-final-norm end logit norm "
        "2.75x the final-norm runs' (the paper's ~20-40x; a softmax saturated as the paper's "
        f"needs >= 10x); by the criterion: {verdict})"
    )
    assert note.endswith("absent, so a verdict other than yes is 'not reproduced at this scale'.")


def test_with_its_premise_present_or_a_yes_the_verdict_stands():
    assert claim5_premise(_runs(25.0), NO)[0] == plain(NO)  # premise present: a real no
    assert claim5_premise(_runs(25.0), NO)[1].endswith("; present.")
    assert claim5_premise(_runs(2.0), YES)[0] == plain(YES)  # clusters anyway: it holds
    unlogged = _runs(2.0).assign(logit_norm_end=float("nan"))
    assert claim5_premise(unlogged, NO) == (
        plain(NO),
        " Premise not measured (no end logit norms).",
    )


def test_the_criterion_states_the_premise():
    text = next(c.criterion for c in claims.CLAIMS if c.cells == claims.claim5).text
    assert "premise: the unanchored no-final-norm end logit norm >= 10x" in text
    assert "else not reproduced at this scale" in text


def _convention(verdict: str) -> GradVerdict:
    return GradVerdict("before clipping", verdict, "", "", 0, 4, ())


@pytest.mark.parametrize(
    "chase, verdicts, expected",
    [
        (2.75, [NO, PARTLY], NOT_REPRODUCED),  # partly, with the premise absent
        (25.0, [NO, PARTLY], PARTLY),  # premise present: the criterion's verdict stands
        (25.0, [YES, YES], YES),
        (2.0, [YES, YES], YES),  # clusters anyway: it holds
        (25.0, [NO, NO], NO),
    ],
)
def test_claim_5s_judge_combines_the_conventions_then_checks_the_premise(chase, verdicts, expected):
    claim = claims.CLAIMS[4]
    measured = GradientClaim(
        Source("main", _runs(chase), True), pd.DataFrame(), list(map(_convention, verdicts)), ""
    )
    assert claim.judge(measured).grade == expected
