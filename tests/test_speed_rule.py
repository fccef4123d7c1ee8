"""The speed rule (analysis/speed_rule.py) that judges claim 7 and DyT's speed half: on synthetic
runs (clear yes, clear no, within the margin, noisy, too few runs, disturbed), and on every
committed reference run's own benchmark CSVs, where one rerun must not reverse the verdict."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tapernorm.analysis import speed_rule
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims import dyt as claims_dyt
from tapernorm.analysis.claims.rows import (
    NO,
    NOT_JUDGED,
    NOT_RESOLVED,
    WEAKER,
    YES,
    ClaimInputs,
)
from tapernorm.analysis.tables import inference as inference_tables

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_BENCH = sorted(ROOT.glob("results/reference/*/results/bench"))
CELLS = [("forward", "eager", 1, 128), ("forward", "eager", 4, 128), ("decode", "eager", 1, 128)]


def _run(folded: float, dyt: float = 1.0, cpu: str = "a test CPU", **extra) -> pd.DataFrame:
    """One run's timed rows: every cell at these speedups over the baseline (q1/q3 at +-2%)."""
    rows = []
    for benchmark, mode, batch, length in CELLS:
        for variant, s in (("baseline", 1.0), ("explicit", 1.0), ("folded", folded), ("dyt", dyt)):
            rows.append(
                dict(
                    benchmark=benchmark, mode=mode, variant=variant, batch=batch,
                    seq_len=length if benchmark == "forward" else math.nan,
                    prompt_len=length if benchmark == "decode" else math.nan,
                    speedup=s, speedup_q1=s * 0.98, speedup_q3=s * 1.02, own_median_ms=10 / s,
                    device="cpu", device_name=cpu, dtype="float32", torch="2", threads=2,
                    n_embd=512, n_layer=8, params=30_000_000, rounds=7, warmup=1, tok_s=100 * s,
                    latency_ms=10 / s, new_tokens=16, prefill_ms=1.0, decode_tok_s=100 * s,
                    disturbed=False,
                    disturbed_why="", source="", skipped="", **extra,
                )
            )  # fmt: skip
    return pd.DataFrame(rows)


def _runs(folded: list[float], dyt: list[float] | None = None, **kw) -> list[pd.DataFrame]:
    dyt = dyt or [1.0] * len(folded)
    return [_run(f, d, **kw) for f, d in zip(folded, dyt, strict=True)]


def _inputs(runs: list[pd.DataFrame], **kw) -> ClaimInputs:
    pool = [(f"run{i}", r) for i, r in enumerate(runs[1:])]
    return ClaimInputs(bench=runs[0], bench_pool=pool, **kw)


def _claim7(runs: list[pd.DataFrame], **kw) -> dict:
    return claims.claim7(_inputs(runs, **kw))


def _here(runs: list[pd.DataFrame], **kw):
    """Claim 7's typed timings of this machine (fold.Timings) on these runs."""
    return claims.CLAIMS[6].measure(_inputs(runs, **kw)).here


# ---- the rule itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratios", "state"),
    [
        ([1.10, 1.11, 1.09, 1.10], speed_rule.FASTER),  # faster by well over 3%
        ([0.90, 0.91, 0.89, 0.90], speed_rule.SLOWER),
        ([1.00, 1.005, 0.995, 1.002], speed_rule.WITHIN),  # no gain either way
        ([1.10, 0.95, 1.20, 0.98], speed_rule.NOT_RESOLVED),  # noisy reruns
        ([1.02, 1.03, 1.04, 1.03], speed_rule.NOT_RESOLVED),  # straddles the 3% edge
        ([1.10, 1.10], speed_rule.NOT_RESOLVED),  # two runs: fewer than MIN_RUNS
        ([1.10], speed_rule.NOT_RESOLVED),
        ([], speed_rule.NOT_RESOLVED),
    ],
)
def test_the_rule_decides_on_the_runs_interval_at_its_margin(ratios, state):
    decision = speed_rule.decide([math.log(r) for r in ratios])
    assert decision.state == state and decision.runs == len(ratios)
    if len(ratios) >= 2:
        assert decision.low <= decision.ratio <= decision.high


def test_a_runs_ratio_is_the_geometric_mean_over_its_grid():
    run = _run(1.0)
    run.loc[run["variant"] == "folded", "speedup"] = [1.0, 1.21, 1.1]
    run.loc[run["variant"] == "dyt", "speedup"] = [1 / 1.1, 1.1, 1.0]
    assert math.exp(speed_rule.grid_log_ratio(run, "folded", "baseline")) == pytest.approx(1.1)
    assert math.exp(speed_rule.grid_log_ratio(run, "folded", "dyt")) == pytest.approx(1.1)
    with pytest.raises(ValueError, match="no benchmark cell has both folded and nope timed"):
        speed_rule.grid_log_ratio(run, "folded", "nope")


def test_the_pool_takes_this_host_class_once_and_names_disturbed_runs():
    own = _run(1.10)
    busy = _run(1.5).assign(disturbed=True, disturbed_why="other processes used 1.00 cores")
    other_cpu = _run(0.5, cpu="another CPU")
    other_grid = _run(0.5)[lambda d: d["benchmark"] == "forward"]
    pool = [
        ("same", own.copy()),  # this run itself, given again
        ("a", _run(1.11)),
        ("a-copy", _run(1.11)),
        ("b", _run(1.09)),
        ("busy", busy),
        ("cpu", other_cpu),
        ("grid", other_grid),
    ]
    runs, used, left_out = speed_rule.pooled(own, pool)
    assert used == ["a", "b"] and len(runs) == 3
    assert left_out == ["busy (disturbed timing)"]
    decision, _ = speed_rule.judge(own, pool, "folded", "baseline")
    assert decision.state == speed_rule.FASTER and decision.left_out == ("busy (disturbed timing)",)
    note = speed_rule.pool_note(used, decision.left_out)
    # golden: the rendered text (the pool's note)
    assert (
        note == "Pooled with 2 run(s) of this host class: a, b; left out: busy (disturbed timing)."
    )


def test_load_pool_reads_a_runs_bench_directory_and_refuses_in_one_line(tmp_path):
    bench = tmp_path / "run-x/results/bench"
    bench.mkdir(parents=True)
    run = _run(1.1)
    run[run["benchmark"] == "forward"].drop(columns="prompt_len").to_csv(
        bench / "forward.csv", index=False
    )
    run[run["benchmark"] == "decode"].drop(columns="seq_len").to_csv(
        bench / "decode.csv", index=False
    )
    [(name, rows)] = speed_rule.load_pool([bench])
    assert name == "run-x" and len(rows) == len(run)
    with pytest.raises(FileNotFoundError, match="benchmark pool directory .* does not exist"):
        speed_rule.load_pool([tmp_path / "nope"])
    with pytest.raises(ValueError, match="has no forward or decode CSV"):
        speed_rule.load_pool([tmp_path])


# ---- claim 7 and DyT's speed half by the rule -------------------------------------------------------


def test_claim7_by_the_rule_yes_no_within_noisy_and_too_few_runs():
    fast = _claim7(_runs([1.10, 1.11, 1.09]))
    assert fast["grade"] == YES and fast["Holds?"] == "yes"
    assert fast["numbers"].estimate == pytest.approx(1.10, abs=5e-4)
    assert "1.100×" in fast["Ours"]
    weak = _claim7(_runs([1.04, 1.041, 1.039]))  # faster by the margin, below FOLD_SPEEDUP_YES
    assert weak["grade"] == WEAKER and "1.22×" in weak["Holds?"]  # the paper's best named
    slow = _claim7(_runs([0.90, 0.91, 0.89]))
    assert slow["grade"] == NO and slow["numbers"].estimate == pytest.approx(0.90, abs=5e-4)
    assert _here(_runs([0.90, 0.91, 0.89])).decision.state == speed_rule.SLOWER
    same = _claim7(_runs([1.0, 1.005, 0.995]))
    assert same["grade"] == NO
    assert _here(_runs([1.0, 1.005, 0.995])).decision.state == speed_rule.WITHIN
    noisy = _claim7(_runs([1.10, 0.95, 1.20]))
    assert noisy["grade"] == NOT_RESOLVED and noisy["Holds?"].startswith("not resolved (")
    alone = _claim7(_runs([1.10, 1.11]))
    assert alone["grade"] == NOT_RESOLVED and _here(_runs([1.10, 1.11])).decision.runs == 2
    assert "the rule needs 3 runs" in alone["Holds?"]
    # the rule and its margin are stated in the row claims.md shows
    assert speed_rule.RULE in fast["Comment"]
    assert _here(_runs([1.10, 1.11, 1.09])).used == ["run0", "run1"]
    assert "run0, run1" in fast["Comment"]  # the pooled runs named


def test_claim7s_measure_times_each_machine_apart_and_its_judge_grades_this_one():
    """The typed numbers behind the row: this run's decision over its own host class, a GPU
    check's over its own; the judge grades this machine's and notes the GPU's beside it."""
    cpu = _runs([1.0, 1.004, 0.997])  # within the margin on the CPU
    gpus = _runs([1.10, 1.11, 1.09], cpu="GPU X")
    pool = [(f"cpu{i}", r) for i, r in enumerate(cpu[1:])] + [("gpu1", gpus[1]), ("gpu2", gpus[2])]
    claim = claims.CLAIMS[6]
    measured = claim.measure(ClaimInputs(bench=cpu[0], bench_pool=pool, gpu=gpus[0]))
    here, gpu = measured.here, measured.gpu
    assert (here.decision.state, here.decision.runs, here.used) == (
        speed_rule.WITHIN,
        3,
        ["cpu0", "cpu1"],
    )
    assert (gpu.decision.state, gpu.decision.runs, gpu.used) == (
        speed_rule.FASTER,
        3,
        ["gpu1", "gpu2"],
    )
    assert gpu.decision.ratio == pytest.approx(1.10, abs=0.01) and here.disturbed == []
    verdict = claim.judge(measured)
    assert verdict.grade == NO and verdict.text.endswith("; on a GPU: yes")
    alone = claim.measure(ClaimInputs(bench=cpu[0], bench_pool=pool))
    assert alone.gpu is None and claim.judge(alone).grade == NO


def test_a_gpu_check_is_judged_apart_pooled_with_its_own_class_only():
    cpu = _runs([1.0, 1.004, 0.997])  # within the margin on the CPU
    gpus = _runs([1.10, 1.11, 1.09], cpu="GPU X")
    pool = [(f"cpu{i}", r) for i, r in enumerate(cpu[1:])] + [("gpu1", gpus[1]), ("gpu2", gpus[2])]
    row = claims.claim7(ClaimInputs(bench=cpu[0], bench_pool=pool, gpu=gpus[0], gpu_where="X"))
    assert row["grade"] == NO and row["Holds?"].endswith("; on a GPU: yes")
    assert "gpu1, gpu2" in row["Comment"].split("On a GPU", 1)[1]  # the GPU's pool named
    inp = ClaimInputs(bench=cpu[0], bench_pool=pool[:2], gpu=gpus[0])
    alone = claims.claim7(inp)
    on_gpu = claims.CLAIMS[6].measure(inp).gpu.decision  # no pooled GPU run left: one run
    assert (on_gpu.state, on_gpu.runs) == (speed_rule.NOT_RESOLVED, 1)
    assert on_gpu.ratio == pytest.approx(1.10, abs=5e-4)
    assert "; on a GPU: not resolved" in alone["Holds?"] and "1.100×" in alone["Holds?"]


def test_disturbed_cells_are_still_not_judged():
    runs = _runs([1.10, 1.11, 1.09])
    busy = runs[0].assign(disturbed=True, disturbed_why="other processes used 1.00 cores")
    row = _claim7([busy, *runs[1:]])
    assert row["grade"] == NOT_JUDGED and row["Holds?"] == "not judged: disturbed timing"
    assert len(_here([busy, *runs[1:]]).disturbed) == 3
    assert row["Comment"].startswith("NOT JUDGED: 3 cell(s)")
    state, speed, _ = claims_dyt.speed_half(ClaimInputs(bench=busy, bench_pool=[]))
    assert state is None and speed == "not judged, disturbed timing"


def test_dyt_speed_half_by_the_same_rule():
    def half(folded, dyt):
        runs = _runs(folded, dyt)
        pool = [(f"run{i}", r) for i, r in enumerate(runs[1:])]
        return claims_dyt.speed_half(ClaimInputs(bench=runs[0], bench_pool=pool))

    state, speed, lines = half([1.10, 1.11, 1.09], [1.0, 1.0, 1.0])
    assert state == YES and speed.startswith("folded faster (") and "1.100×" in speed
    assert "3 runs): faster." in lines[-1]
    assert lines[-1].endswith("run0, run1.")  # the pooled runs named
    assert half([1.0, 1.0, 1.0], [1.10, 1.11, 1.09])[0] == NO  # DyT faster
    state, speed, _ = half([1.0, 1.0, 1.0], [1.0, 1.004, 0.997])
    assert state == NO and speed.startswith("no gain of 3% (")
    assert half([1.10, 0.95, 1.20], [1.0, 1.0, 1.0])[0] == NOT_RESOLVED


def test_the_claims_command_pools_the_given_runs_and_states_the_rule(tmp_path):
    dirs = []
    for i, f in enumerate([1.10, 1.11, 1.09]):
        bench = tmp_path / f"run{i}/results/bench"
        bench.mkdir(parents=True)
        run = _run(f)
        run.drop(columns="prompt_len")[run["benchmark"] == "forward"].to_csv(
            bench / "forward.csv", index=False
        )
        run.drop(columns="seq_len")[run["benchmark"] == "decode"].to_csv(
            bench / "decode.csv", index=False
        )
        dirs.append(bench)
    own = sorted(dirs[0].glob("*.csv"))
    out = claims.write_claims(tmp_path / "claims.md", bench_files=own, bench_pool=dirs)
    line = next(ln for ln in out.read_text().splitlines() if ln.startswith("| 7."))
    assert "| yes |" in line and "1.100×" in line
    assert speed_rule.RULE in line  # the rule and its margin stated
    assert "run1, run2" in line  # the pooled runs named
    inputs = json.loads(out.with_suffix(".json").read_text())["inputs"]
    assert inputs["benchmark pool (speed rule)"] == "3 run(s)"


# ---- every committed reference run: one verdict, or not resolved on all ------------------------------


def _committed(bench_dir: Path) -> pd.DataFrame:
    files = sorted(bench_dir.glob("forward*.csv")) + sorted(bench_dir.glob("decode*.csv"))
    return inference_tables.timed(inference_tables.load_bench(files))


@pytest.mark.skipif(len(REFERENCE_BENCH) < 2, reason="the checkout has no reference runs")
def test_claim7_and_dyts_speed_half_give_one_verdict_on_every_committed_reference_run():
    """Each committed run judged from its own benchmark CSVs, pooled with the committed runs of its
    host class as `tapernorm claims --bench-pool` does: one rerun must not reverse the verdict.
    A speed is a property of a host class, so the verdict is one per class (and every run of a
    class gets it)."""
    pool = speed_rule.load_pool(REFERENCE_BENCH)
    claim7, dyt, disturbed = {}, {}, []
    for bench_dir in REFERENCE_BENCH:
        name, own = bench_dir.parents[1].name, _committed(bench_dir)
        inp = ClaimInputs(bench=own, bench_pool=pool)
        row = claims.claim7(inp)
        state, speed, _ = claims_dyt.speed_half(inp)
        if inference_tables.disturbed_cells(own):  # still not judged, on either
            assert row["grade"] == NOT_JUDGED and state is None, name
            disturbed.append(name)
            continue
        host = speed_rule.host_class(own)
        claim7.setdefault(host, {})[name] = row["grade"]
        dyt.setdefault(host, {})[name] = state
    assert sum(len(runs) for runs in claim7.values()) >= 2
    for host in claim7:
        assert len(set(claim7[host].values())) == 1, (host, claim7[host])
        assert len(set(dyt[host].values())) == 1, (host, dyt[host])
    # what the committed runs say today: the AMD EPYC class (9 runs judged) is not resolved on
    # both; the Intel Xeon class has three runs since intel-xeon-2c-e8928647fa89
    verdicts = {h: (set(claim7[h].values()).pop(), set(dyt[h].values()).pop()) for h in claim7}
    amd = [v for h, v in verdicts.items() if any(n.startswith("amd-") for n in claim7[h])]
    assert amd and all(v == (NOT_RESOLVED, NOT_RESOLVED) for v in amd), verdicts
