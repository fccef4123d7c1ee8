"""Passes over the training tokens (epochs) in the scaling study and the scale card, from the run
configs and the data directory's meta.json ("not measured" without it, never 0); seed pairs of the
study trained on two hosts, marked in per_seed.csv and said in summary.md."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from test_scaling import _study

from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.claims.scale_card import scale_card
from tapernorm.analysis.epochs import NOT_MEASURED, epochs, epochs_text, meaning, paper_passes
from tapernorm.analysis.studies.scaling import read_study, summarize
from tapernorm.analysis.studies.scaling_io import split_hosts_lines, write_summary

HOST_A = {"cpu": "CPU A", "cores": 2, "system": "Linux 1", "machine": "x86_64"}
HOST_B = {**HOST_A, "system": "Linux 2"}


def _data(root: Path, train_tokens) -> Path:
    root.mkdir(parents=True)
    meta = {"vocab_size": 512, "eot_id": 0, "train_tokens": train_tokens, "val_tokens": 5}
    meta["corpus"] = "made-up"
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def _runs(corpus: str, train_tokens=None) -> pd.DataFrame:
    return pd.DataFrame(
        {"steps": [10, 30], "batch_size": [4, 4], "block_size": [25, 25], "corpus": [corpus] * 2,
         "train_tokens": [train_tokens] * 2}
    )  # fmt: skip


def test_epochs_are_the_tokens_drawn_over_the_training_tokens(tmp_path):
    data = _data(tmp_path / "data", 2_000)
    assert epochs(_runs(str(data))).tolist() == pytest.approx([0.5, 1.5])  # 1,000 and 3,000
    # a run on the first 500 tokens of the split: over those
    assert epochs(_runs(str(data), 500)).tolist() == pytest.approx([2.0, 6.0])
    for bad in (None, 0, -3, "2000", True):  # absent, not a positive count: never 0 or inf
        other = _data(tmp_path / f"bad{bad}", bad)
        assert epochs(_runs(str(other))).isna().all(), bad
    assert epochs(_runs(str(tmp_path / "nowhere"))).isna().all()  # no meta.json
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken/meta.json").write_text('{"train_tokens": 20')
    assert epochs(_runs(str(tmp_path / "broken"))).isna().all()
    assert epochs_text(math.nan) == NOT_MEASURED and epochs_text(5.4459) == "5.45"
    once = meaning(pd.Series([0.5]), pd.Series([2_000.0]), "made-up")
    # at most one pass: the less-than-one-pass branch (with the most passes), not "repeatedly"
    assert "0.50" in once and "less than one pass" in once and "repeatedly" not in once


def _point_records(dirs: list[Path], data: Path | None, hosts: dict[str, dict]) -> None:
    """Point every record's data.dir at `data` and give it a host (HOST_A unless in `hosts`)."""
    for d in dirs:
        config = json.loads((d / "config.json").read_text())
        if data is not None:
            config["data"]["dir"] = str(data)
        config["meta"] = {"provenance": {"host": hosts.get(d.name, HOST_A)}}
        (d / "config.json").write_text(json.dumps(config))


def test_the_study_gives_each_rows_epochs_and_what_they_mean(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    _point_records(dirs, _data(tmp_path / "data", 3_072), {})
    summary, per_seed = summarize(read_study(dirs))
    rows = summary[summary["claim"] == "1"].sort_values("steps")
    # CI_GRID: batch 8 x block 32; 24 and 48 steps over 3,072 tokens
    assert rows["epochs"].tolist() == pytest.approx([24 * 8 * 32 / 3072, 48 * 8 * 32 / 3072])
    assert rows["data_train_tokens"].tolist() == [3072, 3072]
    write_summary(summary, per_seed, tmp_path / "out")
    md = (tmp_path / "out/summary.md").read_text()
    assert "| Epochs |" in md and "| 2.00 | +2.00% |" in md and "| 4.00 |" in md
    # golden: the rendered text
    assert "Passes over the training tokens (epochs): 2.00-4.00, over the 3,072 training" in md
    assert "about 4.0 times" in md and "The paper (paper v1, Table 5): not stated" in md
    csv = pd.read_csv(tmp_path / "out/summary.csv", dtype={"claim": str})
    assert csv.loc[csv["claim"] == "1", "epochs"].tolist() == pytest.approx([2.0, 4.0])
    record = json.loads((tmp_path / "out/summary.json").read_text())
    assert "2.00-4.00" in record["passes"] and record["passes"] in md  # the sentence of summary.md


def test_without_the_data_meta_the_epochs_are_not_measured_never_0(tmp_path):
    _, dirs = _study(tmp_path / "r", {})
    _point_records(dirs, tmp_path / "no-data", {})
    summary, per_seed = summarize(read_study(dirs))
    gaps = summary[summary["unit"] == "%"]
    assert gaps["epochs"].isna().all() and gaps["data_train_tokens"].isna().all()
    # the ablation trains on the first N tokens (config data.train_tokens): known without meta
    ablation = summary[summary["unit"] == "x"]
    assert (ablation["epochs"] > 0).all() and ablation["data_train_tokens"].notna().all()
    write_summary(summary, per_seed, tmp_path / "out")
    md = (tmp_path / "out/summary.md").read_text()
    assert f"| {NOT_MEASURED} |" in md
    passes = json.loads((tmp_path / "out/summary.json").read_text())["passes"]
    assert NOT_MEASURED in passes and "0.00" not in passes and passes in md
    csv = pd.read_csv(tmp_path / "out/summary.csv", dtype={"claim": str})
    assert csv.loc[csv["unit"] == "%", "epochs"].isna().all()  # an empty cell, not 0
    card = scale_card(ClaimInputs(runs=read_study(dirs).runs))
    training = card.loc[card[""] == "Training", "Ours"].iloc[0]
    assert training.endswith(f"epochs {NOT_MEASURED}") and "0.00" not in training


def test_the_scale_card_gives_the_runs_and_the_studys_epochs(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    _point_records(dirs, _data(tmp_path / "data", 3_072), {})
    study = read_study(dirs)
    summary, per_seed = summarize(study)
    write_summary(summary, per_seed, tmp_path / "out")
    from tapernorm.analysis.claims.scaling import load_scaling

    runs = study.runs[study.runs["steps"] == 24]
    card = scale_card(ClaimInputs(runs=runs, scaling=load_scaling(tmp_path / "out/summary.csv")))
    rows = dict(zip(card[""], zip(card["Ours"], card["Paper"], strict=True), strict=True))
    ours, theirs = rows["Training"]
    # the 24-step runs' 2.00 epochs, then the study's most (the 48-step runs' 4.00)
    assert "2.00 epochs" in ours and ours.endswith("up to 4.00)")
    assert theirs.endswith("(paper v1, Table 5)")  # the paper's value, with its version
    ours, theirs = rows["Passes over the training tokens"]
    these, study_runs = ours.split("; ")[0], ours.split("; ")[-1]
    assert "2.00" in these and "3,072" in these and "4.00" not in these
    assert "2.00-4.00" in study_runs and "The paper" not in ours
    assert theirs.startswith(paper_passes())


def test_a_seed_pair_trained_on_two_hosts_is_marked(tmp_path):
    _, dirs = _study(tmp_path / "r", {("internal_aux", 24): [1.0, 3.0]})
    # seed 1 at 24 steps: Internal-Taper (+aux) on host B, its baseline on A (split); at 48 steps
    # both arms of seed 1 on B (one host: not split)
    moved = ("internal_aux-d32-s1-n24", "internal_aux-d32-s1-n48", "baseline-d32-s1-n48")
    _point_records(dirs, None, dict.fromkeys(moved, HOST_B))
    summary, per_seed = summarize(read_study(dirs))
    gaps = per_seed[per_seed["claim"] == "1"].set_index(["steps", "seed"])
    assert gaps["split_hosts"].to_dict() == {
        (24, 0): False, (24, 1): True, (48, 0): False, (48, 1): False
    }  # fmt: skip
    assert gaps.loc[(24, 1), "hosts"] == (
        "CPU A (2 cores, Linux 1): Baseline; CPU A (2 cores, Linux 2): Internal-Taper (+aux)"
    )
    assert gaps.loc[(48, 1), "hosts"] == "CPU A (2 cores, Linux 2)"
    write_summary(summary, per_seed, tmp_path / "out")
    seeds = pd.read_csv(tmp_path / "out/per_seed.csv", dtype={"claim": str})
    assert seeds.loc[seeds["split_hosts"], ["claim", "steps", "seed"]].values.tolist() == [
        ["1", 24, 1]
    ]
    md = (tmp_path / "out/summary.md").read_text()
    [line] = json.loads((tmp_path / "out/summary.json").read_text())["split_hosts"]
    assert line in md and "Seed 1 " in line and "claim 1," in line and "24 steps" in line
    assert md.count("trained on two hosts") == 1


def test_a_seed_whose_pairs_ran_on_two_hosts_each_on_one_is_said_apart():
    both = "A: Baseline compiled, Internal-Taper (+aux) compiled; B: Baseline eager, ..."
    per_seed = pd.DataFrame(
        {"claim": ["1", "1", "1"], "width": [32] * 3, "steps": [2000] * 3, "seed": [0, 1, 2],
         "hosts": [both, both, "A"], "split_hosts": [False, False, False]}
    )  # fmt: skip
    assert split_hosts_lines(per_seed) == [  # golden: the rendered text
        "- Claim 1, d=32, 2,000 steps: seed(s) 0, 1 average pairs trained on different hosts, "
        f"each pair on one ({both})."
    ]


def test_a_seeds_hosts_read_the_same_whatever_order_its_records_come_in():
    """The workflow gives the records in its rule order, a test in sorted order: the same text."""
    from tapernorm.analysis.studies.scaling import seed_hosts

    runs = pd.DataFrame(
        {"variant": ["all_aux", "baseline", "all_aux", "baseline"], "seed": [2] * 4,
         "data_seed": [2] * 4, "compiled": [True, True, False, False],
         "host": ["A", "A", "B", "B"]}
    )  # fmt: skip
    forward, backward = seed_hosts(runs), seed_hosts(runs.iloc[::-1])
    assert forward == backward
    assert forward["hosts"] == (
        "A: All-Taper (+aux) compiled, Baseline compiled; B: All-Taper (+aux) eager, Baseline eager"
    )
    assert forward["split_hosts"] is False
