"""claims.json's machine-readable numbers beside each row's prose (claims.numbers), and claim 7's
verdict by the speed rule over reruns (a measured slowdown in a cell is named in the row)."""

import json
import math

import pandas as pd
import pytest
from conftest import speed_reruns
from test_analysis import _paired

from tapernorm.analysis import speed_rule
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.document import claim_dyt
from tapernorm.analysis.claims.numbers import FIELDS, record_fields
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.runtime.jsonio import dumps


def _bench(cells: dict[tuple[str, int], tuple[float, float, float]]) -> pd.DataFrame:
    """Decode rows: per (mode, batch) the folded model's per-round speedups (q1, median, q3); the
    explicit export at 1.1x (1.0-1.2) everywhere."""
    rows = []
    for (mode, batch), folded in cells.items():
        for variant, (q1, med, q3) in (
            ("baseline", (1.0, 1.0, 1.0)),
            ("explicit", (1.0, 1.1, 1.2)),
            ("folded", folded),
        ):
            rows.append(
                dict(
                    benchmark="decode", mode=mode, variant=variant, batch=batch, prompt_len=128,
                    new_tokens=16, prefill_ms=1.0, decode_tok_s=100 * med, speedup=med,
                    speedup_q1=q1, speedup_q3=q3, rounds=9, warmup=1, device="cpu",
                    device_name="a test CPU", dtype="float32", torch="2", threads=2, n_embd=512,
                    n_layer=8, params=30_000_000, disturbed=False, disturbed_why="", source="",
                    skipped="",
                )
            )  # fmt: skip
    return pd.DataFrame(rows)


def _criterion(measure):
    """The criterion CLAIMS declares for the claim measured by `measure`."""
    return next(c.criterion for c in claims.CLAIMS if c.cells == measure)


def _record_row(inp: ClaimInputs, number: str) -> dict:
    """The claims.json entry of claim `number` ("1.", ..., "TaperNorm") computed from `inp`."""
    claim = {"1.": claims.claim1, "2.": claims.claim2, "6.": claims.claim6, "7.": claims.claim7}
    claim["TaperNorm"] = claim_dyt
    row = claim[number](inp)
    fields = record_fields(row, _criterion(claim[number]))
    json.loads(dumps(fields))  # plain JSON: no NaN or infinity
    return {**row, **fields}


def test_every_row_has_the_fields_and_says_why_a_number_is_null():
    record = claims.claims_record(ClaimInputs(), None, {})
    for row in record["claims"]:
        assert set(FIELDS) <= set(row)
        assert row["estimate"] is None and row["no_estimate"].startswith("not measured")
        assert row["verdict"] == row["Holds?"] == "not measured"
        assert row["criterion"]["text"]  # stated even where nothing was measured
    gap = next(r for r in record["claims"] if r["Claim"].startswith("1."))
    assert (gap["criterion"]["low"], gap["criterion"]["high"]) == (-2.0, 2.0)


@pytest.mark.parametrize("number, variant", [("1.", "internal_aux"), ("2.", "all_aux")])
def test_the_gap_fields_are_the_numbers_of_the_prose(number, variant):
    row = _record_row(ClaimInputs(runs=_paired({variant: [0.9, 1.4, 1.1]})), number)
    assert row["unit"] == "%" and row["n_seeds"] == 3
    assert row["estimate"] == pytest.approx(1.1333, abs=1e-3)
    quoted = f"d=64: {row['estimate']:+.2f}% [{row['ci_low']:+.2f}%, {row['ci_high']:+.2f}%]"
    assert row["Ours"].startswith(quoted) and row["headline"].startswith(quoted)
    assert row["ci_low"] < row["estimate"] < row["ci_high"] < 2.0
    assert row["verdict"] == "yes" and row["interval"].startswith("95% t interval")
    assert [p["label"] for p in row["parts"]][0].startswith("d=64")


def test_a_single_seed_pair_has_no_interval_and_says_so():
    row = _record_row(ClaimInputs(runs=_paired({"internal_aux": [1.0]}, base=(4.0,))), "1.")
    assert row["estimate"] == pytest.approx(1.0)
    assert row["ci_low"] is None
    assert row["n_seeds"] == 1 and "1 seed pair" in row["Ours"]


def test_the_dyt_row_carries_both_arms_and_their_difference():
    runs = _paired({"internal_aux": [1.0]}, base=(4.0,))
    untied = _paired({"dyt": [5.0]}, base=(3.6,))
    untied["variant"] = untied["variant"].replace({"baseline": "baseline_untied"})
    untied["name"] = untied["variant"] + "-d64-s0"
    row = _record_row(ClaimInputs(runs=pd.concat([runs, untied], ignore_index=True)), "TaperNorm")
    assert "+1.00%" in row["Ours"] and "+5.00%" in row["Ours"]  # both arms quoted in the prose
    assert row["estimate"] == pytest.approx(-4.0)
    assert row["criterion"]["high"] == 0.0
    estimates = [p["estimate"] for p in row["parts"]]
    assert estimates == pytest.approx([1.0, 5.0]) and row["verdict"].startswith("partly")


def test_claim7_names_a_slower_cell_and_judges_by_the_speed_rule():
    bench = _bench(
        {
            ("eager", 1): (1.05, 1.08, 1.10),
            ("eager", 4): (1.02, 1.05, 1.07),
            ("compiled", 1): (1.01, 1.03, 1.06),
            ("compiled", 4): (0.93, 0.96, 0.98),  # slower in 3 of 4 rounds
        }
    )
    row = claims.claim7(ClaimInputs(bench=bench))
    slower = row["Ours"].split("folded slower in ", 1)[1].split(";")[0]  # the cells named
    assert slower.startswith("decode compiled B=4 P=128") and "0.96×" in slower
    assert "below 1 in 1/2" in row["Ours"]
    ratio = (1.08 * 1.05 * 1.03 * 0.96) ** 0.25  # one run: the rule needs three
    # golden: the rendered text (claim 7's Holds? cell)
    assert row["Holds?"] == (
        f"not resolved (folded/baseline {ratio:.3f}× over the grid (1 run; the rule needs 3 runs "
        "of one host class))"
    )
    fields = _record_row(ClaimInputs(bench=bench, bench_pool=speed_reruns(bench)), "7.")
    assert fields["estimate"] == pytest.approx(ratio, rel=2e-3)
    assert fields["grade"] == "not resolved"  # 2.9% faster: the 3% edge inside its interval
    assert fields["ci_low"] < 1.03 < fields["ci_high"] and "3 runs" in fields["headline"]
    cell = next(p for p in fields["parts"] if p["label"] == "decode compiled B=4 P=128")
    assert (cell["estimate"], cell["ci_low"], cell["ci_high"]) == (0.96, 0.93, 0.98)


def test_claim7_is_no_where_the_reruns_are_slower_yes_where_faster():
    slow = _bench({("eager", 1): (0.97, 0.99, 1.02), ("eager", 4): (0.90, 0.92, 0.95)})
    row = claims.claim7(ClaimInputs(bench=slow, bench_pool=speed_reruns(slow)))
    assert row["grade"] == "no" and row["numbers"].estimate == pytest.approx(0.955, abs=5e-4)
    assert row["numbers"].ci_high < 1 / 1.03  # slower: wholly below the margin
    calm = _bench({("eager", 1): (1.02, 1.08, 1.12), ("eager", 4): (1.03, 1.09, 1.12)})
    assert claims.claim7(ClaimInputs(bench=calm, bench_pool=speed_reruns(calm)))["grade"] == "yes"
    span = _bench({("eager", 1): (0.98, 1.0, 1.02), ("eager", 4): (0.99, 1.01, 1.03)})
    same = claims.claim7(ClaimInputs(bench=span, bench_pool=speed_reruns(span)))
    assert same["grade"] == "no" and same["numbers"].estimate == pytest.approx(1.006, abs=5e-4)
    decision = claims.CLAIMS[6].measure(ClaimInputs(bench=span, bench_pool=speed_reruns(span)))
    assert decision.here.decision.state == speed_rule.WITHIN  # no gain of 3%


def test_claim7_judges_a_gpu_check_apart_by_the_same_rule():
    cpu = _bench({("eager", 1): (1.02, 1.08, 1.12), ("eager", 4): (1.03, 1.09, 1.12)})
    gpu = _bench({("eager", 1): (0.90, 0.92, 0.95), ("eager", 4): (0.91, 0.93, 0.96)})
    gpu = gpu.assign(device="cuda", device_name="GPU X")  # not the CPU runs' host class
    inp = ClaimInputs(
        bench=cpu, bench_pool=speed_reruns(cpu), gpu=gpu, gpu_where="GPU X, bf16; DIR"
    )
    row = claims.claim7(inp)
    assert row["Holds?"].startswith("yes; on a GPU: not resolved")
    on_gpu = claims.CLAIMS[6].measure(inp).gpu.decision  # judged apart: one run of its class
    assert on_gpu.state == speed_rule.NOT_RESOLVED and on_gpu.runs == 1
    assert on_gpu.ratio == pytest.approx(0.925, abs=5e-4) and "0.925×" in row["Holds?"]
    gpu_ours = row["Ours"].split("on a GPU", 1)[1]  # the GPU's timings after the CPU's
    assert "GPU X, bf16; DIR" in gpu_ours and "folded best 0.93×" in gpu_ours
    assert "first-GPU check" in row["Comment"] and "GPU X, bf16; DIR" in row["Comment"]
    plain = claims.claim7(ClaimInputs(bench=cpu, bench_pool=speed_reruns(cpu)))
    assert plain["grade"] == "yes" and "GPU" not in plain["Ours"]


def test_claim6_reports_its_largest_difference():
    verify = [("v.json", {"folded": _check(3e-7), "scaled": _check(8e-7), "model": "m"})]
    row = _record_row(ClaimInputs(verify=verify), "6.")
    assert row["estimate"] == pytest.approx(8e-7)
    assert row["criterion"]["high"] == 1e-5
    assert "8.0e-07 (explicit scaling)" in row["Ours"] and row["verdict"] == "yes"
    assert math.isclose(max(p["estimate"] for p in row["parts"]), 8e-7)


def _check(rel: float) -> dict:
    return {"rel_logit_diff": rel, "loss_diff": 1e-7, "ok": True, "rtol": 1e-5}


def test_each_criterions_grading_is_written_once_and_the_comment_states_it():
    for claim in claims.CLAIMS:
        assert claim.criterion.grading, claim.measure.__name__
        # claims.json's criterion: its text and bounds; the grading is the comment's
        assert set(claim.criterion.to_dict()) == {"text", "low", "high"}
    row = claims.claim1(ClaimInputs(runs=_paired({"internal_aux": [0.9, 1.4, 1.1]})))
    assert _criterion(claims.claim1).grading in row["Comment"]


def test_the_intro_names_the_module_that_measures_each_claim():
    # golden: the rendered text (the intro's list of modules)
    assert claims.measured_where() == (
        "loss.py (claims 1, 2), chasing.py (3-5), fold.py (6, 7), finetune.py (8), stability.py "
        "(stability) and dyt.py (TaperNorm vs DyT)"
    )
    # from the declarations: reordered, the list follows them
    swapped = (claims.CLAIMS[5], claims.CLAIMS[0], claims.CLAIMS[9])
    said = claims.measured_where(swapped)
    assert said.index("fold.py (claims 1)") < said.index("loss.py (2)") < said.index("dyt.py (")
    assert claims.measured_where(claims.CLAIMS[:1]) == "loss.py (claims 1)"


def test_a_claims_statement_and_paper_value_are_its_declarations():
    """The Claim and Paper cells come from the declaration in CLAIMS (a measure fills the rest),
    the numbered claims by their place, also where nothing was measured."""
    table = claims.claims_table(ClaimInputs())
    assert list(table["Ours"]) == [claims.NOT_MEASURED] * len(claims.CLAIMS)
    rows = table.to_dict("records")
    for number, (claim, row) in enumerate(zip(claims.CLAIMS, rows, strict=True), 1):
        numbered = claim.statement if claim.name else f"{number}. {claim.statement}"
        assert row["Claim"] == numbered
        assert row["Paper"].startswith(claim.paper_value)
    # golden: the rendered text (the Claim cells of claims 1 and 2)
    assert [c.title(n) for n, c in enumerate(claims.CLAIMS, 1)][:2] == [
        "1. Internal-Taper (+aux) validation loss within ~2% of the baseline",
        "2. All-Taper (+aux) validation loss within ~2% of the baseline",
    ]
    measured = claims.claim6(ClaimInputs())  # a measure alone: no statement, no paper value
    assert set(measured) == {"Ours", "Scale", "Holds?", "Comment", "grade"}
