"""Benchmarks that know when they cannot be trusted: one statistic behind every column, the load of
other processes measured, disturbed cells flagged in the CSV, the tables, figure 5 and claim 7.

The load tests start busy processes (an artificial CPU load) and check that the benchmark sees
them; no test asserts a timing."""

import math
import subprocess
import sys
from contextlib import contextmanager

import pandas as pd
import pytest

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.figures import speedups as figure_speedups
from tapernorm.analysis.tables import inference as inference_tables
from tapernorm.bench.forward import bench_forward
from tapernorm.bench.grid import summary_table
from tapernorm.bench.trust import (
    LOAD_LIMIT,
    SPREAD_LIMIT,
    LoadMeter,
    disturbance,
    load_now,
    paired,
    paired_cell,
)
from tapernorm.bench.variants import inference_variants, paper_config, random_variants

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")


@contextmanager
def busy_processes(n: int = 2):
    """`n` processes spinning on a CPU each: an artificial load."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        load_now(0.3)  # let them start
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_paired_columns_agree_with_each_other():
    base, other = [2.0, 4.0, 9.0, 2.0, 3.0], [1.0, 2.5, 3.0, 2.0, 1.0]
    p = paired(base, other)
    assert p.speedup == 2.0  # median of 2, 1.6, 3, 1, 3
    assert (p.speedup_q1, p.speedup_q3) == (1.6, 3.0)
    assert p.seconds == 3.0 / 2.0  # the baseline's median over the speedup: throughputs agree
    assert p.own_median == 2.0 and p.spread == pytest.approx((2.5 - 1.0) / 2.0)
    cell = paired_cell({"baseline": base, "folded": other})
    assert cell["baseline"].speedup == 1.0 and cell["baseline"].seconds == 3.0
    assert cell["baseline"].seconds / cell["folded"].seconds == cell["folded"].speedup


def test_disturbance_names_load_and_spread():
    calm = paired_cell({"baseline": [1.0, 1.0, 1.0], "folded": [0.9, 0.95, 1.0]})
    assert disturbance(calm, load=0.0) == "" and disturbance(calm, load=None) == ""
    loaded = disturbance(calm, load=1.0)  # the load, named; the calm spread not
    assert "1.00 cores" in loaded and "spread" not in loaded
    wild = paired_cell({"baseline": [1.0, 1.0, 1.0, 1.0], "folded": [0.1, 1.0, 1.0, 10.0]})
    assert wild["folded"].speedup_spread > SPREAD_LIMIT
    spread = disturbance(wild, load=0.0)  # the arm that spread and by how much; no load
    assert "folded" in spread and "baseline" not in spread and "cores" not in spread
    assert f"{wild['folded'].speedup_spread:.0%}" in spread


def test_the_load_meter_does_not_count_its_own_process(monkeypatch):
    from tapernorm.bench import trust

    # a machine on which only this process runs: its busy time is this process's
    monkeypatch.setattr(trust, "_busy_cpu_seconds", trust._own_cpu_seconds)
    with LoadMeter() as own:
        sum(i * i for i in range(1_000_000))
    assert own.cores == 0.0


@linux_only
def test_the_load_meter_sees_busy_processes():
    with busy_processes(2), LoadMeter() as loaded:
        load_now(1.0)
    assert loaded.cores > 2 * LOAD_LIMIT  # two busy loops: about min(2, cores) cores


def tiny_models():
    cfg = paper_config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, block_size=48)
    return inference_variants(*random_variants(cfg, seed=0))


@linux_only
def test_a_benchmark_under_artificial_load_flags_every_cell(tmp_path):
    models, reference = tiny_models()
    with busy_processes(2):
        rows = bench_forward(models, (1,), (8, 16), warmup=1, iters=40, reference=reference)
    df = pd.DataFrame(rows).assign(source="random weights")
    assert df["disturbed"].all() and (df["load"] > LOAD_LIMIT).all()
    assert df["load_before"].iloc[0] > LOAD_LIMIT
    assert df["disturbed_why"].str.contains("other processes used").all()
    flagged = [ln for ln in summary_table(df).splitlines() if ln.startswith("DISTURBED: ")]
    assert len(flagged) == len(df.drop_duplicates(["mode", "batch", "seq_len"]))  # every cell
    assert "eager B=1 seq_len=8" in flagged[0]
    path = tmp_path / "forward.csv"
    df.to_csv(path, index=False)
    table, caption = inference_tables.table3(inference_tables.load_bench([path]))
    ours = table[table["B"] == 1]["Folded (ours)"]
    assert ours.str.endswith(inference_tables.DISTURBED).sum() == 2
    assert "DISTURBED TIMING in 2 cell(s)" in caption and "--forcerun bench_forward" in caption
    row = claims.claim7(claims.ClaimInputs(bench=inference_tables.load_bench([path])))
    assert row["Holds?"] == "not judged: disturbed timing"
    assert row["Comment"].startswith("NOT JUDGED: 2 cell(s)")


def decode_frame(disturbed: bool) -> pd.DataFrame:
    rows = []
    for variant, speedup in (("baseline", 1.0), ("explicit", 1.1), ("folded", 1.2)):
        rows.append(
            dict(
                benchmark="decode", mode="eager", variant=variant, batch=1, prompt_len=8,
                new_tokens=4, prefill_ms=1.0, decode_tok_s=100 * speedup, decode_ms=40 / speedup,
                speedup=speedup, speedup_q1=speedup * 0.9, speedup_q3=speedup * 1.1, rounds=5,
                warmup=1, device="cpu", device_name="cpu", dtype="float32", torch="2",
                threads=2, n_embd=32, n_layer=2, params=10_000, load=1.5 if disturbed else 0.0,
                disturbed=disturbed, disturbed_why="other processes used 1.50 cores" if disturbed
                else "",
            )
        )  # fmt: skip
    return pd.DataFrame(rows).assign(source="")


def test_idle_cells_carry_no_flag_and_a_verdict():
    df = decode_frame(disturbed=False)
    table, caption = inference_tables.table_decode(df)
    assert inference_tables.DISTURBED not in caption
    assert not table.to_string().count(inference_tables.DISTURBED)
    # judged (by the speed rule: one run alone is not resolved), not "not judged"
    assert claims.claim7(claims.ClaimInputs(bench=df))["grade"] == "not resolved"


def test_figure5_draws_disturbed_cells_hollow():
    fig, caption = figure_speedups.fig5(decode_frame(disturbed=True))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    [folded] = [label for label in labels if label.startswith("Folded")]
    assert inference_tables.DISTURBED in folded and "hollow" in folded  # marked, drawn hollow
    assert "DISTURBED TIMING" in caption and "DISTURBED" not in fig.get_supxlabel()


def test_csvs_from_before_the_trust_columns_still_load(tmp_path):
    old = decode_frame(disturbed=False).drop(columns=["load", "disturbed", "disturbed_why"])
    old.to_csv(tmp_path / "decode.csv", index=False)
    df = inference_tables.load_bench([tmp_path / "decode.csv"])
    assert not df["disturbed"].any() and math.isnan(df["load"].iloc[0])
