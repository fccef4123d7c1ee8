"""The learning-rate grid study (tapernorm lr-grid): which runs, their configs, the summary's
arithmetic, and the command end to end on a tiny config."""

import json
import math
from pathlib import Path

import pytest
import yaml

from tapernorm import pipeline as tp
from tapernorm.cli import main
from tapernorm.config import ConfigError
from tapernorm.lr_grid import GridRun, grid_run_config, grid_runs, summarize

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def _config(**pretrain) -> dict:
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["pretrain"].update(pretrain)
    return tp.validate_pipeline_config(raw, SCHEMA)


def test_the_grid_adds_each_variants_matched_baseline_and_sets_only_the_lr():
    cfg = _config()
    runs = grid_runs(cfg, ["dyt", "internal_aux"], [3e-3, 1e-3], seeds=2)
    arms = list(dict.fromkeys(r.variant for r in runs))
    assert arms == ["baseline_untied", "baseline", "dyt", "internal_aux"]
    assert len(runs) == 4 * 2 * 2 and runs[0] == GridRun("baseline_untied", 32, 0, 1e-3)
    assert runs[0].name == "baseline_untied-d32-s0-lr0.001"
    rc = grid_run_config(cfg, GridRun("dyt", 32, 1, 0.008), "data/pretrain")
    family = tp.run_config(cfg, "pretrain", "dyt-d32-s1", "data/pretrain")
    assert rc["train"]["lr"] == 0.008 and rc["name"] == "lr_grid/dyt-d32-s1-lr0.008"
    rc["train"]["lr"], rc["name"] = family["train"]["lr"], family["name"]
    assert rc == family  # everything else is the family's run
    untied = grid_run_config(cfg, GridRun("internal_aux_untied", 32, 0, 0.002), "data/pretrain")
    assert not untied["model"]["tie_embeddings"] and untied["anchor"]["enabled"]
    for bad, message in (
        ((["nope"], [1e-3], 1), "unknown variants"),
        ((["dyt"], [0.0], 1), "finite and > 0"),
        ((["dyt"], [1e-3], 0), "seeds"),
    ):
        with pytest.raises(ConfigError, match=message):
            grid_runs(cfg, *bad)


def _eval(out: Path, run: GridRun, loss: float | None) -> None:
    d = out / "runs" / run.name
    d.mkdir(parents=True)
    result = {"val_loss": loss, "diverged": loss is None}
    (d / "eval.json").write_text(json.dumps(result))


def test_summary_gaps_at_the_shared_and_at_each_arms_best_lr(tmp_path):
    losses = {  # (variant, lr): per seed; None = diverged
        ("baseline_untied", 1e-3): [3.6, 3.7],
        ("baseline_untied", 3e-3): [3.4, 3.4],
        ("baseline_untied", 8e-3): [None, 3.5],
        ("dyt", 1e-3): [4.0, 4.1],
        ("dyt", 3e-3): [3.5, 3.5],
        ("dyt", 8e-3): [3.3, 3.3],
    }
    runs = []
    for (variant, lr), per_seed in losses.items():
        for seed, loss in enumerate(per_seed):
            run = GridRun(variant, 64, seed, lr)
            _eval(tmp_path, run, loss)
            runs.append(run)
    cells, gaps = summarize(runs, tmp_path, shared_lr=1e-3)
    cell = {(c["variant"], c["lr"]): c for c in cells}
    assert cell[("baseline_untied", 8e-3)]["diverged"] == 1
    assert math.isinf(cell[("baseline_untied", 8e-3)]["val_loss_mean"])
    assert cell[("dyt", 1e-3)]["val_loss_mean"] == pytest.approx(4.05)
    (gap,) = gaps
    assert gap["variant"] == "dyt" and gap["against"] == "Baseline (untied head)"
    assert gap["gap_shared_pct"] == pytest.approx(100 * (4.05 - 3.65) / 3.65)
    assert (gap["best_lr"], gap["baseline_best_lr"]) == (8e-3, 3e-3)
    assert gap["gap_best_pct"] == pytest.approx(100 * (3.3 - 3.4) / 3.4)


def test_the_command_trains_the_grid_reuses_finished_runs_and_writes_the_summary(
    shards_dir, tmp_path, capsys
):
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["pretrain"].update(steps=6, log={"every": 2, "eval_windows": 4, "ckpt_every": 6})
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "grid"
    argv = ["lr-grid", "--config", str(config), "--schema", SCHEMA, "--data", str(shards_dir)]
    argv += ["--variants", "dyt", "--lrs", "3e-3", "6e-3", "--seeds", "1", "--jobs", "2"]
    argv += ["--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "4 runs, 0 done, 4 to train" in text
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "baseline_untied-d32-s0-lr0.003",
        "baseline_untied-d32-s0-lr0.006",
        "dyt-d32-s0-lr0.003",
        "dyt-d32-s0-lr0.006",
    ]
    run_cfg = json.loads((out / "runs/dyt-d32-s0-lr0.006/config.json").read_text())
    assert run_cfg["train"]["lr"] == 0.006 and run_cfg["model"]["norm"] == "dyt"
    md = (out / "lr_grid.md").read_text()
    assert "tapernorm lr-grid --config" in md and "| DyT | Baseline (untied head) |" in md
    assert main(argv) == 0
    assert "4 runs, 4 done, 0 to train" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["lr-grid", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
