"""The LR a study's runs were trained at beside the arm's best on the committed LR grid, read from
the records' configs and the grid (analysis/studies/lr_context.py): in the README's scaling rows and the
claims' DyT row, so a gap at the shared LR far below DyT's best says so itself."""

import json
from pathlib import Path

import pytest

from tapernorm.analysis.claims.document import load_lr_grid
from tapernorm.analysis.claims.dyt import study_lr_lines
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.claims.scaling import load_scaling
from tapernorm.analysis.studies.lr_context import committed_grid, lr_note, study_lrs

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results/cpu/scaling"
GRID = {
    "path": "results/cpu/lr_grid",
    "scale": {"n_embd": 64, "steps": 600},
    "gaps": [{"variant": "dyt", "label": "DyT", "best_lr": 0.032}],
}


def _record(study: Path, name: str, lr) -> None:
    run = study / "runs/scaling" / name
    run.mkdir(parents=True)
    record = {"model": {}, "data": {"dir": "data/x"}, "train": {"lr": lr}}
    (run / "config.json").write_text(json.dumps(record))


def test_study_lrs_reads_the_records_configs(tmp_path):
    _record(tmp_path, "dyt-d64-s0-n600", 0.001)
    _record(tmp_path, "dyt-d64-s1-n6000", 0.001)
    _record(tmp_path, "baseline_untied-d64-s0-n600", 0.003)
    assert study_lrs(tmp_path, "dyt") == [0.001]
    assert study_lrs(tmp_path, "baseline_untied") == [0.003]
    assert study_lrs(tmp_path, "all_aux") == []
    _record(tmp_path, "all_aux-d64-s0-n600", "fast")
    with pytest.raises(ValueError, match="all_aux-d64-s0-n600/config.json has no valid train.lr"):
        study_lrs(tmp_path, "all_aux")


def test_lr_note_says_how_far_from_the_arms_best():
    assert lr_note([0.001], GRID, "dyt") == (
        "at LR 0.001, 32x below DyT's best LR 0.032 on the LR grid (results/cpu/lr_grid: d=64, "
        "600 steps)"
    )
    assert (
        lr_note([0.001], GRID, "dyt", short=True) == "at LR 0.001, 32x below DyT's best (LR grid)"
    )
    assert lr_note([0.064], GRID, "dyt", short=True) == "at LR 0.064, 2x above DyT's best (LR grid)"
    assert lr_note([0.032], GRID, "dyt", short=True) == "at DyT's best LR 0.032 (LR grid)"
    assert lr_note([0.001], GRID, "internal_aux") == ""  # not on the grid
    assert lr_note([0.001, 0.003], GRID, "dyt") == ""  # several LRs: no one place
    assert lr_note([0.001], None, "dyt") == ""


@pytest.mark.skipif(not (STUDY / "summary.csv").is_file(), reason="no committed scaling study")
def test_the_committed_dyt_rows_say_they_are_at_the_shared_lr(monkeypatch):
    from tapernorm.artifact.doc_blocks import scaling_brief_block

    monkeypatch.chdir(ROOT)
    grid = committed_grid(Path("results/cpu/scaling"))
    best = {g["variant"]: g["best_lr"] for g in grid["gaps"]}["dyt"]
    (lr,) = study_lrs(STUDY, "dyt")
    factor = f"{best / lr:.0f}x below" if best > lr else ""
    brief = scaling_brief_block(Path("results/cpu/scaling"), Path("."))
    dyt = next(line for line in brief.splitlines() if line.startswith("| DyT |"))
    assert dyt.endswith(f"at LR {lr:g}, {factor} DyT's best (LR grid) |")
    assert "LR grid" not in next(ln for ln in brief.splitlines() if ln.startswith("| 1 |"))
    inp = ClaimInputs(
        scaling=load_scaling("results/cpu/scaling/summary.csv"),
        lr_grid=load_lr_grid("results/cpu/lr_grid/lr_grid.json"),
    )
    assert study_lr_lines(inp) == [
        f"scaling study's DyT runs at LR {lr:g}, {factor} DyT's best LR {best:g} on the LR grid "
        "(results/cpu/lr_grid: d=64, 600 steps)"
    ]
    assert study_lr_lines(ClaimInputs(scaling=inp.scaling)) == []  # no grid given: nothing said
