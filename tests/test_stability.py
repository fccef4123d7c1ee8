"""Blow-ups in the analysis: the run table's blow-up columns, exact rates (Clopper-Pearson, Fisher,
the crossed grid's conditional test), the stability study's summary and its rule, the one blow-up
rule of the loss verdicts (the scaling study's rows, claims 1 and 2), and the stability claim."""

import json
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import config_files, spike_at, tiny_run
from test_scaling import CI_GRID, _dry_run
from test_scaling import _study as _scaling_study

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.document import claim_stability
from tapernorm.analysis.claims.loss import BLOWUP_RULE
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.claims.stability import load_stability
from tapernorm.analysis.rates import (
    axis_test,
    binom_cdf,
    clopper_pearson,
    fisher_exact,
    pooled_axis_test,
)
from tapernorm.analysis.runs import load_runs
from tapernorm.analysis.stats import last_weights_gap, paired_gap, t975
from tapernorm.analysis.studies.scaling import read_study, summarize
from tapernorm.analysis.studies.scaling_io import write_summary as write_scaling_summary
from tapernorm.analysis.studies.stability import read_records, shared_triggers, trigger_steps
from tapernorm.analysis.studies.stability import summarize as summarize_stability
from tapernorm.analysis.studies.stability import write_summary as write_stability_summary
from tapernorm.cli import main
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow import files as wf
from tapernorm.workflow import job_functions as jf
from tapernorm.workflow.stability import STABILITY_DIR, record_dir

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
SCALING = ROOT / "results/cpu/scaling"
PAIR = re.compile(r"init \d+, data \d+")


def _by_pair(text: str) -> dict[str, str]:
    """The entries of a '; '-joined list that name seed pairs ('init 0, data 2: ...'), by pair."""
    entries = re.split(r"; (?=[^;]*?init \d+, data \d+)", text)
    return {PAIR.search(e)[0]: e for e in entries}


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


# ---- exact rates ------------------------------------------------------------------------------------


def _tail_ge(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


@pytest.mark.parametrize(
    "k, n, lo, hi", [(0, 10, 0.0, 0.3085), (3, 10, 0.0667, 0.6525), (12, 12, 0.7354, 1.0)]
)
def test_clopper_pearson_known_values(k, n, lo, hi):
    got = clopper_pearson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


@pytest.mark.parametrize("k, n", [(1, 12), (5, 12), (9, 12), (17, 40)])
def test_clopper_pearson_ends_put_two_and_a_half_percent_in_each_tail(k, n):
    lo, hi = clopper_pearson(k, n)
    assert _tail_ge(k, n, lo) == pytest.approx(0.025, abs=1e-9)  # P(X >= k | lo)
    assert 1 - _tail_ge(k + 1, n, hi) == pytest.approx(0.025, abs=1e-9)  # P(X <= k | hi)
    assert binom_cdf(k, n, hi) == pytest.approx(0.025, abs=1e-9)
    # closed forms at the edges: 0/n's upper end, n/n's lower end
    assert clopper_pearson(0, n)[1] == pytest.approx(1 - 0.025 ** (1 / n), abs=1e-12)
    assert clopper_pearson(n, n)[0] == pytest.approx(0.025 ** (1 / n), abs=1e-12)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson(n + 1, n)


def _hypergeom(a: int, b: int, c: int, d: int) -> float:
    return math.comb(a + b, a) * math.comb(c + d, c) / math.comb(a + b + c + d, a + c)


def test_fisher_two_sided_p_by_direct_computation():
    # 5 of 12 runs blew up in one arm, 0 of 6 in the other: every table with these margins
    # (first cell x = 0..5) no more probable than the observed (x = 5)
    observed = _hypergeom(5, 7, 0, 6)
    tables = [_hypergeom(x, 12 - x, 5 - x, 1 + x) for x in range(0, 6)]
    assert sum(tables) == pytest.approx(1.0)
    direct = sum(p for p in tables if p <= observed * (1 + 1e-7))
    assert fisher_exact(5, 7, 0, 6) == pytest.approx(direct) == pytest.approx(978 / 8568)
    assert fisher_exact(7, 5, 6, 0) == pytest.approx(direct)  # clean counts: the same test
    assert fisher_exact(3, 1, 1, 3) == pytest.approx(
        34 / 70
    )  # Fisher's tea: (1 + 16 + 1 + 16) / 70
    assert fisher_exact(6, 0, 6, 0) == 1.0  # an empty margin: nothing to test
    assert fisher_exact(12, 0, 0, 12) == pytest.approx(2 / math.comb(24, 12))


def test_axis_test_is_the_exact_law_of_the_grid():
    # 4 init seeds x 3 data seeds; the 4 runs of data seed 2 blew up: the most gathered placement
    cells = {(i, j): j == 2 for i in range(4) for j in range(3)}
    by_data, by_init = axis_test(cells, 1), axis_test(cells, 0)
    assert by_data.counts == {0: 0, 1: 0, 2: 4} and by_data.sizes == {0: 4, 1: 4, 2: 4}
    assert by_data.p == pytest.approx(3 / math.comb(12, 4)) == pytest.approx(by_data.min_p)
    assert by_init.p == pytest.approx(1.0)  # one per row: as spread as can be
    # 3 blow-ups gathered in one column cannot reach p < 0.05 on that axis: 3 C(4,3) / C(12,3)
    three = {(i, j): j == 2 and i < 3 for i in range(4) for j in range(3)}
    assert axis_test(three, 1).p == pytest.approx(12 / 220) == pytest.approx(0.0545, abs=1e-4)
    assert axis_test(three, 1).min_p == pytest.approx(12 / 220)
    # ... and 3 in one row (3 runs a row) can: 4 / C(12, 3)
    row = {(i, j): i == 1 for i in range(4) for j in range(3)}
    assert axis_test(row, 0).p == pytest.approx(4 / 220)
    # exhaustive check of one p: enumerate the C(12, 3) placements
    from itertools import combinations

    keys = list(cells)
    stat = lambda chosen: sum(sum(1 for k in chosen if k[1] == j) ** 2 for j in range(3))  # noqa: E731
    observed = stat([k for k in keys if three[k]])
    hits = sum(stat(c) >= observed for c in combinations(keys, 3))
    assert axis_test(three, 1).p == pytest.approx(hits / math.comb(12, 3))


def test_pooled_axis_test_adds_each_grids_statistic():
    one = {(i, j): j == 2 and i < 2 for i in range(4) for j in range(3)}  # 2 in data seed 2
    alone = axis_test(one, 1)
    pooled = pooled_axis_test([one, one], 1)
    assert pooled.counts == {0: 0, 1: 0, 2: 4} and pooled.sizes == {0: 8, 1: 8, 2: 8}
    assert pooled.p < alone.p  # the same pattern in two arms is stronger evidence
    assert pooled.p == pytest.approx(pooled.min_p)
    assert alone.p == pytest.approx(3 * math.comb(4, 2) / math.comb(12, 2))


# ---- the run table's blow-up columns ----------------------------------------------------------------


def test_committed_records_are_scored_on_their_logged_steps():
    runs = load_runs(
        [SCALING / "runs/scaling" / n for n in (
            "all_aux-d32-s2-n2000", "internal_aux-d32-s0-n2000", "baseline-d32-s0-n2000")]
    )[0].set_index("name")  # fmt: skip
    spiked = runs.loc["scaling/all_aux-d32-s2-n2000"]
    assert not spiked["diverged"] and spiked["blew_up"] and spiked["blowups"] == 3
    assert spiked["first_blowup_step"] == 1750 and spiked["first_blowup_kind"] == "loss_spike"
    assert spiked["blowup_steps"] == (1750, 1870, 2000)
    assert spiked["blowups_checked"] == "logged steps"
    diverged = runs.loc["scaling/internal_aux-d32-s0-n2000"]
    assert diverged["blew_up"] and diverged["first_blowup_step"] == 1925  # (not logged: added)
    assert diverged["first_blowup_kind"] == "diverged"
    assert 0 < diverged["first_blowup_gate"] < 0.05  # late in the taper (600 -> 2,000)
    clean = runs.loc["scaling/baseline-d32-s0-n2000"]
    assert not clean["blew_up"] and clean["blowups"] == 0 and pd.isna(clean["first_blowup_step"])
    assert (runs["data_seed"] == runs["seed"]).all() and runs["compiled"].all()


def test_a_trained_runs_blowups_are_read_from_its_eval_json(shards_dir, tmp_path, monkeypatch):
    from tapernorm.training.loop import train

    spike_at(monkeypatch, 17, 400.0)
    cfg = tiny_run(shards_dir, train={"steps": 24}, log={"every": 4, "ckpt_every": 12})
    train(cfg, tmp_path / "run")
    row = load_runs([tmp_path / "run"])[0].iloc[0]
    assert row["blew_up"] and not row["diverged"] and row["first_blowup_step"] == 17
    assert row["blowups_checked"] == "every step" and 17 in row["blowup_steps"]
    assert row["first_blowup_kind"] in ("loss_spike", "grad_spike")
    assert row["first_blowup_gate"] == 1.0 and row["blowups"] == len(row["blowup_steps"])


# ---- hand-written records of a small stability study -------------------------------------------------

STUDY = {
    "steps": 40,
    "widths": [32],
    "variants": ["baseline", "internal_aux"],
    "init_seeds": [0, 1, 2, 3],
    "data_seeds": [0, 1, 2],
    "eval_points": 4,
}


def _plan(study: dict = STUDY) -> Plan:
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["stability"] = study
    return Plan(validate_pipeline_config(raw, SCHEMA))


def _record(root: Path, plan: Plan, run: str, val: float | None, events=(), **result) -> Path:
    """A stability run's records as `tapernorm train` writes them now: `events` (step, kind) its
    blow-ups (a non-finite one ends it: diverged, weights of the last checkpoint)."""
    cfg = plan.stability.run_config(run, "data/pretrain")
    out = root / record_dir(run)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({**cfg.to_dict(), "n_params": 1000}))
    steps = cfg.train.steps
    nonfinite = [s for s, k in events if k.startswith("nonfinite")]
    last = nonfinite[0] if nonfinite else steps
    lines = [{"step": s, "gate": 1.0, "lr": 1e-3, "loss": 4.0, "grad_norm": 0.5}
             for s in range(2, last, 2)]  # fmt: skip
    recs = [{"step": s, "blowup": {"kind": k, "gate": 0.1, "loss": 9.0, "grad_norm": 1.0,
                                    "reference": 4.0, "batch": {"data_seed": cfg.data_order_seed}}}
            for s, k in events]  # fmt: skip
    lines = sorted(lines + recs, key=lambda r: r["step"])
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    ev = {"val_loss": val, "diverged": bool(nonfinite), "diverged_step": last if nonfinite else None,
          "weights_step": (last // 10) * 10 if nonfinite else steps, "n_params": 1000,
          "blew_up": bool(events), "blowups": len(events),
          "first_blowup_step": events[0][0] if events else None,
          "blowup_events": recs, "blowups_checked": "every step", **result}  # fmt: skip
    (out / "eval.json").write_text(json.dumps(ev))
    return out


# blow-ups of internal_aux: init x data -> events; data seed 2 at step 30 in three init seeds
BLOWUPS = {
    (0, 2): [(30, "loss_spike"), (31, "loss_spike"), (35, "grad_spike")],
    (1, 2): [(30, "nonfinite_grad")],
    (3, 2): [(30, "loss_spike")],
    (2, 0): [(12, "grad_spike")],
}


def _stability_records(root: Path, plan: Plan | None = None, blowups=None) -> list[Path]:
    """Every run of STUDY: the baseline at 3 + init/100 + data/1000, internal_aux 1% above it;
    BLOWUPS' runs blow up (the diverged one at 1.5% above, its weights of step 20); the baseline of
    init 3, data 1 spikes once."""
    plan = plan or _plan()
    blowups = BLOWUPS if blowups is None else blowups
    dirs = []
    for run in plan.stability.runs():
        variant, _, s, o, _ = run.split("-")
        seed, data = int(s[1:]), int(o[1:])
        base = 3.0 + seed / 100 + data / 1000
        events = blowups.get((seed, data), []) if variant == "internal_aux" else []
        if variant == "baseline" and (seed, data) == (3, 1):
            events = [(20, "loss_spike")]
        val = base * (1.015 if (seed, data) == (1, 2) else 1.01) if variant != "baseline" else base
        dirs.append(_record(root, plan, run, val, events))
    return dirs


def test_summary_rows_count_rates_and_pair_gaps_by_seed_pair(tmp_path):
    runs = read_records(_stability_records(tmp_path))
    summary = summarize_stability(runs)
    rows = summary.rows.set_index("arm")
    arm, base = rows.loc["internal_aux"], rows.loc["baseline"]
    assert (arm["n_runs"], arm["n_clean"], arm["n_blowup"], arm["n_diverged"]) == (12, 8, 4, 1)
    assert (base["n_clean"], base["n_blowup"]) == (11, 1)
    assert (arm["clean_ci_low"], arm["clean_ci_high"]) == pytest.approx(clopper_pearson(8, 12))
    assert arm["fisher_p"] == pytest.approx(fisher_exact(8, 4, 11, 1))
    assert math.isnan(base["fisher_p"]) and arm["against_clean"] == "11/12"
    first = _by_pair(arm["first_blowups"])  # each run that blew up: its kind, step and gate
    assert sorted(first) == ["init 0, data 2", "init 1, data 2", "init 2, data 0", "init 3, data 2"]
    assert "loss spike" in first["init 0, data 2"] and "step 30 " in first["init 0, data 2"]
    assert "g=0.100" in first["init 0, data 2"]
    assert "gradient spike" in first["init 2, data 0"] and "step 12" in first["init 2, data 0"]
    # clean pairs: 12 minus the 4 blown-up arms and the spiked baseline's pair = 7, each +1.00%
    assert arm["n_pairs_clean"] == 7 and arm["gap_clean"] == pytest.approx(1.0)
    left = _by_pair(arm["left_out_clean"])
    assert set(left) == {*first, "init 3, data 1"}
    assert "Baseline blew up" in left["init 3, data 1"] and "step 20" in left["init 3, data 1"]
    diverged = left["init 1, data 2"]
    assert "Internal-Taper (+aux)" in diverged and "diverged" in diverged
    # at last weights every pair counts: eleven at +1%, the diverged run's at +1.5%
    assert arm["n_pairs_last_weights"] == 12 and arm["left_out_last_weights"] == ""
    assert arm["gap_last_weights"] == pytest.approx((11 * 1.0 + 1.5) / 12)
    blew = _by_pair(arm["blew_up"])
    assert set(blew) == set(first)
    # the diverged run's weights are named with their step; the others kept their final ones
    assert [p for p, e in blew.items() if "weights of step" in e] == ["init 1, data 2"]
    assert "step 30 (of 40)" in blew["init 1, data 2"]


def test_a_missing_validation_loss_is_named_not_dropped(tmp_path):
    dirs = _stability_records(tmp_path)
    ev = next(d for d in dirs if d.name == "internal_aux-d32-s1-o2-n40") / "eval.json"
    ev.write_text(json.dumps({**json.loads(ev.read_text()), "val_loss": None}))
    row = summarize_stability(read_records(dirs)).rows.set_index("arm").loc["internal_aux"]
    assert row["n_pairs_last_weights"] == 11
    (left,) = _by_pair(row["left_out_last_weights"]).items()
    assert left[0] == "init 1, data 2" and "Internal-Taper (+aux)" in left[1]
    assert "no finite validation loss" in left[1]


def test_the_crossing_says_what_the_grid_can_resolve(tmp_path):
    summary = summarize_stability(read_records(_stability_records(tmp_path)))
    (test,) = [t for t in summary.crossings if t["arms"] == ["internal_aux"]]
    assert test["by_data_seed"] == {"0": "1/4", "1": "0/4", "2": "3/4"}
    assert test["by_init_seed"] == {"0": "1/3", "1": "1/3", "2": "1/3", "3": "1/3"}
    assert test["blowups"] == 4 and test["runs"] == 12
    cells = {(i, j): (i, j) in BLOWUPS for i in range(4) for j in range(3)}
    assert test["p_data"] == pytest.approx(axis_test(cells, 1).p)
    assert test["min_p_data"] == pytest.approx(3 / math.comb(12, 4))  # all 4 in one column
    assert test["p_init"] == pytest.approx(1.0)
    # statistic 1/4 + 9/4: as large or larger only with 3 + 1 or 4 in the columns (16 x 6 + 3 ways)
    assert test["p_data"] == pytest.approx(99 / 495)
    assert test["min_p_init"] == pytest.approx(4 * 9 / 495)  # a full row of 3, and 1 of the 9 left
    statement = test["statement"]
    assert statement.startswith("not resolved") and "neither axis" in statement
    assert f"p={test['p_data']:.3g}" in statement and f"{test['min_p_init']:.3g}" in statement
    md = (write_stability_summary(summary, tmp_path / "out")[1]).read_text()
    assert "| 0 | . | . | S | 1/3 |" in md  # init 0: its data seed 2 run spiked
    assert "| 1 | . | . | D | 1/3 |" in md  # init 1: diverged
    assert "| blew up | 1/4 | 0/4 | 3/4 | 4/12 |" in md  # golden: the rendered text


def test_blowups_following_the_data_order_are_told_apart(tmp_path):
    column = {(i, 2): [(30, "loss_spike")] for i in range(4)}  # the whole of data seed 2
    summary = summarize_stability(read_records(_stability_records(tmp_path, blowups=column)))
    (test,) = [t for t in summary.crossings if t["arms"] == ["internal_aux"]]
    assert test["p_data"] == pytest.approx(3 / 495) and test["p_init"] == pytest.approx(1.0)
    statement = test["statement"]
    assert statement.split(" (")[0].endswith("data order")  # not the init, not both
    # rows of 3 runs: 4 blow-ups can reach p = 36/495 at best on that axis, which is said
    assert test["min_p_init"] == pytest.approx(36 / 495)
    assert "init seed axis" in statement and "0.0727" in statement


def test_the_timing_test_compares_pairs_on_one_data_order_with_pairs_across(tmp_path):
    """Four runs of data seed 2 start at step 30, one of data seed 0 at step 12: the 6 pairs on
    order 2 share a step, none of the 4 across; a relabelling keeps that only when the data seed 0
    label falls on the step-12 run (1 in 5)."""
    column = {(i, 2): [(30, "loss_spike")] for i in range(4)}
    column[(2, 0)] = [(12, "grad_spike")]
    runs = read_records(_stability_records(tmp_path, blowups=column))
    (test,) = summarize_stability(runs).timing
    assert (test["same_order_shared"], test["same_order_pairs"]) == (6, 6)
    assert (test["other_order_shared"], test["other_order_pairs"]) == (0, 4)
    assert 0.18 < test["p"] < 0.22 and test["runs"] == "d=32"
    assert "6 of 6" in test["statement"] and "0 of 4" in test["statement"]
    assert f"p={test['p']:.2g}" in test["statement"]
    one = {(0, 2): [(30, "loss_spike")]}
    assert (
        summarize_stability(read_records(_stability_records(tmp_path / "b", blowups=one))).timing
        == []
    )


def test_shared_triggers_are_one_data_seed_and_step_across_runs(tmp_path):
    runs = read_records(_stability_records(tmp_path))
    triggers = shared_triggers(runs)
    assert [(t["data_seed"], t["step"]) for t in triggers] == [(2, 30)]
    assert len(triggers[0]["runs"]) == 3  # init 0, 1, 3 of data seed 2
    # a run's episode starts: 30-31 is one episode (every step checked), 35 another
    assert trigger_steps((30, 31, 35), "every step") == [30, 35]
    assert trigger_steps((1750, 1760), "logged steps") == [1750, 1760]


def test_summary_refuses_records_of_another_recipe_or_given_twice(tmp_path):
    dirs = _stability_records(tmp_path)
    cfg_path = dirs[0] / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "train": {**cfg["train"], "lr": 1e-2}}))
    with pytest.raises(ValueError, match="differ in lr .* cannot be compared"):
        read_records(dirs)
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="given twice|two records"):
        read_records([*dirs, dirs[0]])


def test_cli_writes_the_summary_and_replaces_only_its_own_files(tmp_path, capsys):
    dirs = _stability_records(tmp_path / "r")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("my notes\n")
    args = ["stability", "summary", "--records", *map(str, dirs), "--out", str(out)]
    assert main(args) == 2
    assert "summary.md exists and is not an earlier output" in capsys.readouterr().err
    assert (out / "summary.md").read_text() == "my notes\n" and not (out / "summary.csv").exists()
    assert main([*args, "--force", "--made-by", "snakemake ... stability"]) == 0
    assert main(args) == 0  # its own files now
    record = json.loads((out / "summary.json").read_text())
    assert record["made_by"] == "" and len(record["rows"]) == 2
    assert (
        record["shared_triggers"][0]["step"] == 30 and record["grids"][1]["arm"] == "internal_aux"
    )
    frame = load_stability(out / "summary.csv")
    assert list(frame["arm"]) == ["baseline", "internal_aux"]


def test_the_docs_blocks_quote_the_committed_summary(tmp_path):
    """README's brief (clean k/n per arm and width, Fisher p, what the blow-ups follow) and
    docs/stability.md's table, from the summary files alone."""
    from tapernorm.artifact.doc_blocks import render_document

    column = {(i, 2): [(30, "loss_spike")] for i in range(4)}  # data seed 2 sets them off
    dirs = _stability_records(tmp_path / "r", blowups=column)
    study = tmp_path / "results/cpu/stability"
    assert main(["stability", "summary", "--records", *map(str, dirs), "--out", str(study)]) == 0
    doc = tmp_path / "README.md"
    doc.write_text(
        "<!-- generated by `tapernorm docs`: stability-brief from results/cpu/stability -->\n"
        "<!-- end generated -->\n"
    )
    brief = render_document(doc, tmp_path)
    header = next(line for line in brief.splitlines() if line.startswith("| Width |"))
    assert _cells(header)[:3] == ["Width", "Baseline", "Internal-Taper (+aux)"]
    assert len(_cells(header)) == 4
    # golden: the rendered text
    assert "| d=32 | 11/12 | 8/12 (p 0.317) | the blow-ups follow the data order |" in brief
    doc.write_text(
        "<!-- generated by `tapernorm docs`: stability from results/cpu/stability -->\n"
        "<!-- end generated -->\n"
    )
    full = render_document(doc, tmp_path)
    row = next(line for line in full.splitlines() if line.startswith("| d=32 | Internal-Taper"))
    assert _cells(row)[2:6] == ["8/12 [0.35, 0.90]", "0", "11/12", "0.317"]
    (trigger,) = [line for line in full.splitlines() if line.startswith("- data seed 2,")]
    assert "step 30" in trigger and trigger.endswith(": 4 runs")
    assert "(summary.md)" not in full
    assert "[summary.md](results/cpu/stability/summary.md)" in full


def test_the_brief_gives_a_permutation_p_at_its_floor_as_a_bound():
    """The permutation test's p cannot go below 1/(draws + 1): the README says 'p ≤' there."""
    from tapernorm.artifact.doc_blocks import stability_brief_block

    study = ROOT / "results/cpu/stability"
    timing = json.loads((study / "summary.json").read_text())["timing"]
    floored = [t for t in timing if t["runs"].startswith("d=") and "p<=" in t["statement"]]
    assert floored  # the committed study: every width at the floor
    block = stability_brief_block(study, ROOT)
    for t in floored:
        row = next(line for line in block.splitlines() if line.startswith(f"| {t['runs']} |"))
        assert row.endswith("across (p ≤ 0.0001) |"), row


def test_the_factor_table_says_which_change_removed_the_blowup_and_its_cost(tmp_path, capsys):
    study = {**STUDY, "factors": {"runs": ["internal_aux-d32-s1-o2-n40"],
                                  "changes": ["no_aux", "plateau", "gelu"]}}  # fmt: skip
    plan = _plan(study)
    dirs = _stability_records(tmp_path / "r", plan)
    fam = plan.stability_factors
    outcomes = {"no_aux": [], "plateau": [(33, "loss_spike")], "gelu": [(30, "nonfinite_loss")]}
    for run in fam.runs():
        factor = run.split("-x")[1]
        cfg = fam.run_config(run, "data/pretrain")
        out = tmp_path / "r" / record_dir(run)
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({**cfg.to_dict(), "n_params": 1000}))
        events = outcomes[factor]
        recs = [{"step": st, "blowup": {"kind": k, "gate": 0.1}} for st, k in events]
        lines = [{"step": 2, "gate": 1.0, "lr": 1e-3, "loss": 4.0, "grad_norm": 0.5}, *recs]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        div = factor == "gelu"
        (out / "eval.json").write_text(json.dumps({
            "val_loss": 3.0 + 1 / 100 + 2 / 1000 + (0.3 if div else 0.03), "diverged": div,
            "diverged_step": 30 if div else None, "weights_step": 20 if div else 40,
            "blew_up": bool(events), "blowups": len(events),
            "first_blowup_step": events[0][0] if events else None, "blowup_events": recs,
            "blowups_checked": "every step"}))  # fmt: skip
        dirs.append(out)
    out = tmp_path / "tables"
    assert main(["stability", "factors", "--records", *map(str, dirs), "--out", str(out)]) == 0
    rows = pd.read_csv(out / "factors.csv").set_index("factor")
    assert list(rows.index) == ["none", "no_aux", "plateau", "gelu"]
    assert rows.loc["none", "outcome"] == "diverged at 30"  # BLOWUPS' (1, 2): non-finite at 30
    assert rows.loc["no_aux", "outcome"] == "clean" and rows.loc["plateau", "outcome"] == (
        "spike at 33"
    )
    assert rows.loc["no_aux", "gap_to_baseline_pct"] == pytest.approx(100 * 0.03 / 3.012)
    md = (out / "factors.md").read_text()
    assert "| no_aux: the scale loss off" in md and "| clean, +1.00% |" in md
    assert rows.loc["gelu", "outcome"] == "diverged at 30" and rows.loc["gelu", "blew_up"]
    assert rows.loc["gelu", "gap_to_baseline_pct"] == pytest.approx(100 * 0.3 / 3.012)  # +9.96%
    assert rows.loc["none", "gap_to_baseline_pct"] == pytest.approx(1.5)
    gelu = _cells(md.splitlines()[-1])
    assert gelu[0].startswith("gelu") and gelu[-1] == "0/1"  # the change left it blowing up
    assert gelu[1] == "diverged at 30, +9.96%"
    # golden: the rendered text
    assert "| none (the run as the study trained it) | diverged at 30, +1.50% | — |" in md
    only_study = ["stability", "factors", "--records", *map(str, dirs[:4]), "--out", str(out)]
    assert main(only_study) == 2
    assert "no run of stability_factors" in capsys.readouterr().err


# ---- the stability claim ----------------------------------------------------------------------------


def _rows(width: int, base: tuple[int, int], arms: dict[str, tuple[int, int]]) -> list[dict]:
    from tapernorm.variants import VARIANTS

    out = []
    for arm, (clean, n) in {"baseline": base, **arms}.items():
        lo, hi = clopper_pearson(clean, n)
        p = math.nan if arm == "baseline" else fisher_exact(clean, n - clean, *base_counts(base))
        out.append({"width": width, "arm": arm, "label": VARIANTS[arm]["label"], "steps": 2000,
                    "n_runs": n, "n_clean": clean, "n_blowup": n - clean, "clean_rate": clean / n,
                    "clean_ci_low": lo, "clean_ci_high": hi,
                    "against": "" if arm == "baseline" else "baseline", "fisher_p": p})  # fmt: skip
    return out


def base_counts(base: tuple[int, int]) -> tuple[int, int]:
    return base[0], base[1] - base[0]


@pytest.mark.parametrize(
    "arms, grade",
    [
        ({"internal_aux": (12, 12), "all_aux": (12, 12)}, "yes"),  # lower ends 0.74
        ({"internal_aux": (12, 12), "all_aux": (11, 12)}, "not resolved"),  # 0.62: too wide
        ({"internal_aux": (12, 12), "all_aux": (5, 12)}, "no"),  # p = 0.005 below the baseline
    ],
)
def test_the_stability_claim_is_graded_by_the_rates(arms, grade):
    study = pd.DataFrame(
        _rows(32, (12, 12), arms) + _rows(64, (12, 12), {"internal_aux": (12, 12)})
    )
    row = claim_stability(ClaimInputs(stability=study))
    assert row["grade"] == grade, row["Holds?"]
    ours = [p for p in row["numbers"].parts if p.variant == "internal_aux"]  # d=32 and d=64
    assert [(p.estimate, p.n_seeds) for p in ours] == [(1.0, 12), (1.0, 12)]
    assert [p.ci_low for p in ours] == pytest.approx([0.7354] * 2, abs=5e-5)
    assert row["numbers"].unit == "clean rate" and row["numbers"].n_seeds == 12
    if grade == "no":
        assert "All-Taper (+aux) 5/12" in row["Holds?"] and "p=0.00" in row["Holds?"]


def test_the_stability_claims_measure_picks_its_source_and_its_judge_combines_the_widths():
    """The typed numbers behind the stability row: the sources with a baseline and a tapered arm
    (the study first), the widths judged; the judge combines the widths strictly."""
    claim = claims.CLAIMS[8]
    arms = {"internal_aux": (12, 12), "all_aux": (5, 12)}
    study = pd.DataFrame(_rows(32, (12, 12), arms) + _rows(64, (12, 12), {"all_aux": (11, 12)}))
    measured = claim.measure(ClaimInputs(stability=study))
    assert (measured.name, measured.widths) == ("stability study", [32, 64])
    assert [v for v, _ in measured.per_width()] == ["no", "not resolved"]
    assert claim.judge(measured).grade == "no"  # one width where it does not train stably
    wide = pd.DataFrame(_rows(64, (12, 12), {"all_aux": (11, 12)}))
    assert claim.judge(claim.measure(ClaimInputs(stability=wide))).grade == "not resolved"


def test_the_stability_claim_judges_the_pretrain_runs_without_the_study(tmp_path):
    plan = _plan()
    dirs = _stability_records(tmp_path, plan)
    runs = load_runs(dirs)[0]
    row = claim_stability(ClaimInputs(runs=runs))
    assert row["Ours"].startswith("pretrain runs: ")
    assert row["grade"] == "not resolved"  # 8/12 [0.35, 0.90]: too wide
    (ours,) = [p for p in row["numbers"].parts if p.variant == "internal_aux"]
    assert ours.estimate == pytest.approx(8 / 12) and ours.n_seeds == 12
    assert (ours.ci_low, ours.ci_high) == pytest.approx(clopper_pearson(8, 12))
    assert claim_stability(ClaimInputs())["Holds?"] == "not measured"


def test_claims_read_the_committed_stability_summary(tmp_path):
    dirs = _stability_records(tmp_path / "r")
    out = tmp_path / "study"
    write_stability_summary(summarize_stability(read_records(dirs)), out)
    path = claims.write_claims(tmp_path / "claims.md", runs=dirs, stability=out / "summary.csv")
    record = json.loads(path.with_suffix(".json").read_text())
    (row,) = [r for r in record["claims"] if r["Claim"].startswith("Stability")]
    assert row["Ours"].startswith("stability study: ") and "pretrain runs" in row["Ours"]
    assert row["unit"] == "clean rate" and row["criterion"]["text"].startswith("at every width")
    assert record["inputs"]["stability study"] == str(out / "summary.csv")


def test_the_claims_rule_reads_the_stability_summary_where_the_checkout_has_it(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert wf.committed_stability_summary() == [] and jf.stability_input(None) == []
    (tmp_path / wf.STABILITY_SUMMARY).parent.mkdir(parents=True)
    (tmp_path / wf.STABILITY_SUMMARY).write_text("x")
    assert jf.stability_input(None) == [wf.STABILITY_SUMMARY]
    assert wf.STABILITY_SUMMARY == f"{STABILITY_DIR}/summary.csv"


# ---- the one blow-up rule of the loss verdicts -------------------------------------------------------


def _paired_runs(spiked: str | None) -> pd.DataFrame:
    """Three seed pairs of baseline and internal_aux at d=64, the variant 0.5% above the baseline
    (seed 2: 3%); `spiked` the run that blew up without diverging (at its final weights)."""
    rows = []
    for variant in ("baseline", "internal_aux"):
        for seed in range(3):
            name = f"{variant}-d64-s{seed}"
            gap = 0.0 if variant == "baseline" else (3.0 if seed == 2 else 0.5)
            rows.append({"name": name, "run": name, "variant": variant, "width": 64, "seed": seed,
                         "data_seed": seed, "compiled": False, "steps": 600, "lr": 1e-3,
                         "corpus": "x", "train_tokens": None, "diverged": False,
                         "val_loss": 4.0 * (1 + gap / 100), "weights_step": 600,
                         "blew_up": name == spiked, "blowups": int(name == spiked),
                         "first_blowup_step": 500 if name == spiked else None,
                         "first_blowup_kind": "loss_spike" if name == spiked else None,
                         "first_blowup_gate": 0.2 if name == spiked else math.nan})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_spiked_run_leaves_the_clean_gap_and_counts_at_its_last_weights():
    runs = _paired_runs("internal_aux-d64-s2")
    clean = paired_gap(runs, 64, "internal_aux", "baseline", clean=True)
    assert clean.per_seed == pytest.approx({0: 0.5, 1: 0.5})
    assert clean.left_out == (
        "seed 2 (Internal-Taper (+aux) blew up: a loss spike at step 500 (g=0.200))",
    )
    everything = last_weights_gap(runs, 64, "internal_aux", "baseline")
    assert everything.n == 3 and everything.mean == pytest.approx(4.0 / 3)
    assert paired_gap(runs, 64, "internal_aux", "baseline").n == 3  # Table 2's rule keeps it


def test_claims_1_and_the_scaling_rows_apply_the_same_rule():
    clean = claims.claim1(ClaimInputs(runs=_paired_runs(None)))
    half = t975(2) * np.std([0.5, 0.5, 3.0], ddof=1) / math.sqrt(3)
    lo, hi = 4.0 / 3 - half, 4.0 / 3 + half
    assert lo < 2.0 < hi  # the interval straddles +2%
    assert clean["grade"] == "not resolved"
    numbers = clean["numbers"]
    assert (numbers.estimate, numbers.ci_low, numbers.ci_high) == pytest.approx((4.0 / 3, lo, hi))
    assert numbers.n_seeds == 3
    # the baseline of seed 2 spiked: the clean pairs are +0.5% twice (no spread: inside the band),
    # and the yes is limited to partly by the blow-up
    inputs = ClaimInputs(runs=_paired_runs("baseline-d64-s2"))
    row = claims.claim1(inputs)
    assert row["grade"] == "partly"
    assert row["numbers"].estimate == pytest.approx(0.5) and row["numbers"].n_seeds == 2
    (width,) = claims.CLAIMS[0].measure(inputs).widths
    assert width.full.n == 3 and width.full.mean == pytest.approx(4.0 / 3)  # at last weights
    assert "+1.33%" in row["Ours"]
    assert "Baseline seed 2" in width.blown and "step 500" in width.blown
    assert BLOWUP_RULE in row["Comment"] and width.blown in row["Comment"]


def test_scaling_rows_count_runs_and_limit_a_yes(tmp_path):
    _, dirs = _scaling_study(tmp_path, {("internal_aux", 24): [0.5, 0.5]})
    summary, per_seed = summarize(read_study(dirs))
    row = summary[(summary["claim"] == "1") & (summary["steps"] == 24)].iloc[0]
    assert (row["n_runs"], row["n_clean"], row["n_blowup"]) == (4, 4, 0)
    assert row["verdict"] == "yes" and row["blew_up"] == ""
    spiked = next(d for d in dirs if d.name == "baseline-d32-s1-n24")
    ev = json.loads((spiked / "eval.json").read_text())
    (spiked / "eval.json").write_text(json.dumps({**ev, "blew_up": True, "blowups": 1,
                                                  "first_blowup_step": 20, "blowup_events": [],
                                                  "blowups_checked": "every step"}))  # fmt: skip
    summary, per_seed = summarize(read_study(dirs))
    row = summary[(summary["claim"] == "1") & (summary["steps"] == 24)].iloc[0]
    assert (row["n_runs"], row["n_clean"], row["n_blowup"]) == (4, 3, 1)
    assert row["n_seeds"] == 1 and row["n_seeds_last_weights"] == 2
    assert row["verdict"] == "not resolved"  # one clean pair left: no interval
    assert row["left_out"].startswith("seed 1 (Baseline blew up") and "; " not in row["left_out"]
    assert "step 20" in row["left_out"]
    seeds = per_seed[(per_seed["claim"] == "1") & (per_seed["steps"] == 24)]
    assert list(seeds["seed"]) == [0, 1] and math.isnan(seeds["value"].iloc[1])
    assert seeds["value_last_weights"].iloc[1] == pytest.approx(0.5)
    write_scaling_summary(summary, per_seed, tmp_path / "out")
    md = (tmp_path / "out/summary.md").read_text()
    (cells,) = [
        _cells(line)
        for line in md.splitlines()
        if line.startswith("| 1:") and _cells(line)[1:3] == ["d=32", "24"]
    ]
    assert cells[9:11] == ["3/4 clean", "+0.50% [+0.50%, +0.50%] (2)"]
    (blew,) = [line for line in md.splitlines() if line.startswith("- Blew up in claim 1,")]
    assert "d=32" in blew and "24 steps" in blew and "Baseline seed 1" in blew
    assert BLOWUP_RULE in md


def _eager_twins(root: Path, dirs: list[Path], **recipe) -> list[Path]:
    """Each scaling record of seed 0 and 1 at 24 steps copied as a stability run of that seed pair,
    trained eager (its val 0.2% above the compiled run's), `recipe` changed in its train section."""
    out = []
    for d in dirs:
        if not d.name.endswith("-n24"):
            continue
        variant, width, seed, steps = d.name.split("-")
        twin = root / "stability" / "runs" / f"{variant}-{width}-{seed}-o{seed[1:]}-{steps}"
        twin.mkdir(parents=True)
        cfg = json.loads((d / "config.json").read_text())
        cfg["name"] = f"stability/{twin.name}"
        cfg["train"] = {**cfg["train"], "compile": not cfg["train"]["compile"], **recipe}
        (twin / "config.json").write_text(json.dumps(cfg))
        ev = json.loads((d / "eval.json").read_text())
        (twin / "eval.json").write_text(json.dumps({**ev, "val_loss": ev["val_loss"] * 1.002}))
        (twin / "metrics.jsonl").write_bytes((d / "metrics.jsonl").read_bytes())
        out.append(twin)
    return out


def test_extra_records_of_a_cells_recipe_are_taken_and_said(tmp_path):
    _, dirs = _scaling_study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    extras = _eager_twins(tmp_path / "x", dirs)
    study = read_study(dirs, extras)
    assert study.runs["extra"].sum() == len(extras)  # every one taken, and said
    assert study.extra_note.startswith(f"{len(extras)} of {len(extras)} ")
    summary, _ = summarize(study)
    row = summary[(summary["claim"] == "1") & (summary["steps"] == 24)].iloc[0]
    assert row["n_runs"] == 8 and row["n_seeds"] == 2  # the seed stays the unit
    assert row["estimate"] == pytest.approx(2.0)  # eager pairs: the same gap as the compiled
    assert row["extra_runs"].startswith("4 compiled")  # (ci: eager)
    assert "stability" in row["extra_runs"] and "seeds 0, 1" in row["extra_runs"]
    longer = summary[(summary["claim"] == "1") & (summary["steps"] == 48)].iloc[0]
    assert longer["extra_runs"] == "" and longer["n_runs"] == 4
    with pytest.raises(ValueError, match="not the recipe of .* lr differ"):
        read_study(dirs, _eager_twins(tmp_path / "y", dirs, lr=0.5))


def test_cli_summary_takes_extra_records(tmp_path):
    _, dirs = _scaling_study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    extras = _eager_twins(tmp_path / "x", dirs)
    out = tmp_path / "out"
    args = ["scaling", "summary", "--records", *map(str, dirs), "--out", str(out)]
    assert main([*args, "--extra-records", *map(str, extras)]) == 0
    md = (out / "summary.md").read_text()
    (note,) = [line for line in md.splitlines() if line.startswith("Extra records:")]
    assert "4 of 4" in note
    assert json.loads((out / "summary.json").read_text())["extra_records"].startswith("4 of 4")


def test_the_committed_scaling_summary_is_what_the_records_give():
    """results/cpu/scaling/summary.csv and per_seed.csv were made by this code from the 75
    committed records and the stability study's 18 runs with init seed = data seed that share a
    cell's recipe (the workflow's extra records; rerun `tapernorm scaling summary` after a change
    to the analysis)."""
    from tapernorm.analysis.comparable import unread_data
    from tapernorm.workflow.scaling import extra_records

    dirs = sorted(p.parent for p in (SCALING / "runs").glob("*/*/eval.json"))
    assert len(dirs) == 75
    plan = Plan(validate_pipeline_config(config_files("config.yaml", "scaling.yaml"), SCHEMA))
    extra = sorted({(ROOT / f).parent for f in extra_records(plan.scaling, ROOT)})
    assert len(extra) == 18
    study = read_study(dirs, extra)
    summary, per_seed = summarize(study)
    committed = pd.read_csv(SCALING / "summary.csv", dtype={"claim": str})
    assert list(committed.columns) == list(summary.columns)
    ours = pd.read_csv(pd.io.common.StringIO(summary.to_csv(index=False)), dtype={"claim": str})
    if unread_data(study.runs):  # no data/pretrain in this checkout: the passes are not measured
        known = ours["epochs"].notna()  # the ablation's: from its config's train_tokens
        assert list(ours.loc[known, "epochs"]) == list(committed.loc[known, "epochs"])
        passes = ["epochs", "data_train_tokens"]
        loss = committed["unit"] == "%"
        assert (committed.loc[loss, "epochs"] > 0).all()
        assert committed.loc[loss, "data_train_tokens"].nunique() == 1  # one corpus
        ours, committed = ours.drop(columns=passes), committed.drop(columns=passes)
    pd.testing.assert_frame_equal(ours, committed)
    seeds = pd.read_csv(SCALING / "per_seed.csv", dtype={"claim": str})
    again = pd.read_csv(pd.io.common.StringIO(per_seed.to_csv(index=False)), dtype={"claim": str})
    pd.testing.assert_frame_equal(again, seeds)
    row = committed[(committed["claim"] == "2") & (committed["width"] == 32)]
    # All-Taper (+aux): seed 1 at 200; at 2,000 compiled seed 2, eager seeds 1 and 2
    assert list(row["n_blowup"]) == [1, 3]


# ---- the workflow ------------------------------------------------------------------------------------

SMALL = {**STUDY, "steps": 24, "init_seeds": [0, 1], "data_seeds": [0, 1]}


def test_the_stability_target_builds_the_summary_from_the_records_alone(tmp_path):
    """With every record of the study in place and no run directory, `stability` plans only the
    summary; once written, nothing, also in a tree where the default ran (its newer data); there, a
    record with a file missing is trained and recorded again, and the summary made again."""
    import shutil

    for name in ("Snakefile", "workflow", "config"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "config/study.yaml").write_text(yaml.safe_dump({"stability": SMALL}))
    plan = _plan(SMALL)
    dirs = [_record(tmp_path, plan, run, 3.0) for run in plan.stability.runs()]
    jobs = _dry_run(tmp_path, "stability")
    assert jobs["stability_summary"] == "1" and "train" not in jobs and "trunk" not in jobs
    assert jobs["stability_manifest"] == "1"
    (tmp_path / STABILITY_DIR).mkdir(parents=True, exist_ok=True)
    (tmp_path / STABILITY_DIR / "manifest.json").write_text("{}")  # written before what it lists
    write_stability_summary(summarize_stability(read_records(dirs)), tmp_path / STABILITY_DIR)
    later = time.time() + 1
    for path in (p for d in dirs for p in d.iterdir()):
        os.utime(path, (later, later))  # a fresh clone's order: the records newest
    assert _dry_run(tmp_path, "stability") == {}
    data = tmp_path / "data/pretrain"  # a tree where the default ran: its data newer than all
    data.mkdir(parents=True)
    for name in ("train.bin", "val.bin", "meta.json", "tokenizer.model"):
        (data / name).write_text("x")
        os.utime(data / name, (later + 5, later + 5))
    assert _dry_run(tmp_path, "stability") == {}
    (dirs[0] / "eval.json").unlink()
    jobs = _dry_run(tmp_path, "stability")
    assert (jobs["train"], jobs["stability_record"], jobs["stability_summary"]) == ("1", "1", "1")
    assert jobs["stability_manifest"] == "1"


def test_ci_grid_is_the_scaling_tests_grid():
    assert CI_GRID["grid"][0]["steps"] == [24, 48]  # (the scaling rows above assume it)


def test_the_committed_stability_summary_is_what_the_records_give():
    """results/cpu/stability/summary.csv was made by this code from the committed records of the
    study's runs (rerun the workflow's stability_summary after a change to the analysis)."""
    from tapernorm.analysis.studies import stability

    study = ROOT / "results/cpu/stability"
    dirs = sorted(p.parent for p in (study / "runs").glob("*-n2000/eval.json"))
    summary = stability.summarize(stability.read_records(dirs))
    ours = pd.read_csv(pd.io.common.StringIO(summary.rows.to_csv(index=False)))
    pd.testing.assert_frame_equal(ours, pd.read_csv(study / "summary.csv"))
    assert set(ours["width"]) == {32, 64} and (ours["n_runs"] >= 10).all()


def test_the_stability_records_of_other_data_bytes_are_refused(tmp_path):
    dirs = _stability_records(tmp_path)
    for i, d in enumerate(dirs):
        config = json.loads((d / "config.json").read_text())
        train_bin = "b" * 64 if i == len(dirs) - 1 else "a" * 64
        config["meta"] = {"provenance": {"data_sha256": {"train.bin": train_bin}}}
        (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="the study's records differ in data sha256") as e:
        read_records(dirs)
    assert dirs[-1].name in str(e.value)
