"""The learning-rate grid study: the lr_grid family's runs and configs (the workflow trains them),
the summary's arithmetic, and `tapernorm lr-grid` summarising finished runs of a tiny config."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml

from tapernorm.analysis.studies.lr_grid import GridRun, read_runs, summarize
from tapernorm.cli import main
from tapernorm.config import ConfigError
from tapernorm.workflow import Plan, read_config_files, validate_pipeline_config
from tapernorm.workflow.training import lr_grid_arms, lr_grid_width

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _config(lr_grid: dict | None = None, **pretrain) -> dict:
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["pretrain"].update(pretrain)
    raw["lr_grid"] = lr_grid or {"variants": ["dyt", "internal_aux"], "lrs": [3e-3, 1e-3]}
    return validate_pipeline_config(raw, SCHEMA)


def test_the_grid_adds_each_variants_matched_baseline_and_sets_only_the_lr():
    grid = Plan(_config()).lr_grid
    assert lr_grid_arms(grid.section) == ["baseline_untied", "baseline", "dyt", "internal_aux"]
    runs = grid.runs()
    assert len(runs) == 4 * 2 * 2 and runs[0] == "baseline_untied-d32-s0-lr0.001"
    rc = grid.run_config("dyt-d32-s1-lr0.003", "data/pretrain")
    family = Plan(_config()).pretrain.run_config("dyt-d32-s1", "data/pretrain")
    assert rc.train.lr == 0.003 and rc.name == "lr_grid/dyt-d32-s1-lr0.003"
    same = rc.replace(train=dataclasses.replace(rc.train, lr=family.train.lr), name=family.name)
    assert same == family  # everything else is the family's run
    with pytest.raises(ValueError, match="not part of the lr_grid family"):
        grid.run_config("dyt-d32-s2-lr0.003", "data/pretrain")  # seeds: 2 (0 and 1)


def test_the_default_grid_is_the_committed_studys():
    files = [ROOT / "config/config.yaml", ROOT / "config/lr-grid.yaml"]
    config = validate_pipeline_config(read_config_files(files, SCHEMA), SCHEMA)
    grid = Plan(config).lr_grid
    committed = json.loads((ROOT / "results/cpu/lr_grid/lr_grid.json").read_text())
    assert len(grid.runs()) == 30
    assert sorted(set(grid.section["lrs"])) == committed["scale"]["lrs"]
    assert lr_grid_width(config) == committed["scale"]["n_embd"]


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"variants": ["nope"], "lrs": [1e-3]}, "lr_grid.variants"),
        ({"variants": ["dyt"], "lrs": [0.0]}, "lr_grid.lrs"),
        ({"variants": ["dyt"], "lrs": [1e-3], "seeds": 0}, "lr_grid.seeds"),
        ({"variants": ["dyt"], "lrs": [1e-3], "width": 33}, "lr_grid.width"),
    ],
)
def test_a_bad_grid_names_its_key(bad, key):
    with pytest.raises(ConfigError, match=key):
        _config(bad)


def _run(root: Path, run: GridRun, loss: float | None) -> Path:
    d = root / run.name
    d.mkdir(parents=True)
    (d / "eval.json").write_text(json.dumps({"val_loss": loss, "diverged": loss is None}))
    cfg = {"variant": run.variant, "seed": run.seed, "model": {"n_embd": run.width}}
    (d / "config.json").write_text(json.dumps({**cfg, "train": {"lr": run.lr}}))
    return d


def test_summary_gaps_at_the_shared_and_at_each_arms_best_lr(tmp_path):
    losses = {  # (variant, lr): per seed; None = diverged
        ("baseline_untied", 1e-3): [3.6, 3.7],
        ("baseline_untied", 3e-3): [3.4, 3.4],
        ("baseline_untied", 8e-3): [None, 3.5],
        ("dyt", 1e-3): [4.0, 4.1],
        ("dyt", 3e-3): [3.5, 3.5],
        ("dyt", 8e-3): [3.3, 3.3],
    }
    dirs = []
    for (variant, lr), per_seed in losses.items():
        for seed, loss in enumerate(per_seed):
            dirs.append(_run(tmp_path, GridRun(variant, 64, seed, lr), loss))
    runs = read_runs(dirs)
    assert list(runs)[0] == GridRun("baseline_untied", 64, 0, 1e-3)
    cells, gaps = summarize(runs, shared_lr=1e-3)
    cell = {(c["variant"], c["lr"]): c for c in cells}
    assert cell[("baseline_untied", 8e-3)]["diverged"] == 1
    assert math.isinf(cell[("baseline_untied", 8e-3)]["val_loss_mean"])
    assert cell[("dyt", 1e-3)]["val_loss_mean"] == pytest.approx(4.05)
    (gap,) = gaps
    assert gap["variant"] == "dyt" and gap["against"] == "Baseline (untied head)"
    assert gap["gap_shared_pct"] == pytest.approx(100 * (4.05 - 3.65) / 3.65)
    assert (gap["best_lr"], gap["baseline_best_lr"]) == (8e-3, 3e-3)
    assert gap["gap_best_pct"] == pytest.approx(100 * (3.3 - 3.4) / 3.4)
    with pytest.raises(ConfigError, match="same cell and seed"):
        read_runs([dirs[0], dirs[0]])


def test_the_command_summarises_the_grids_finished_runs(shards_dir, tmp_path, capsys):
    cfg = _config(
        {"variants": ["dyt"], "lrs": [3e-3, 6e-3], "seeds": 1},
        steps=6,
        log={"every": 2, "eval_windows": 4, "ckpt_every": 6},
    )
    grid = Plan(cfg).lr_grid
    root = tmp_path / "runs"
    for run in grid.runs():
        run_cfg = grid.run_config(run, str(shards_dir)).to_json()
        assert main(["train", "--config-json", run_cfg, "--out", str(root / run)]) == 0
    assert sorted(p.name for p in root.iterdir()) == [
        "baseline_untied-d32-s0-lr0.003",
        "baseline_untied-d32-s0-lr0.006",
        "dyt-d32-s0-lr0.003",
        "dyt-d32-s0-lr0.006",
    ]
    out = tmp_path / "grid"
    argv = ["lr-grid", "--runs", *map(str, sorted(root.iterdir())), "--shared-lr", "3e-3"]
    assert main([*argv, "--data", str(shards_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    md = (out / "lr_grid.md").read_text()
    assert "tapernorm lr-grid --runs" in md and "| DyT | Baseline (untied head) |" in md
    summary = json.loads((out / "lr_grid.json").read_text())
    assert summary["scale"]["n_embd"] == 32 and summary["scale"]["lrs"] == [0.003, 0.006]


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["lr-grid", "--runs", str(tmp_path / "none"), "--shared-lr", "1e-3"]) == 2
    assert "has no eval.json" in capsys.readouterr().err
