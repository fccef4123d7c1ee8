"""The learning-rate grid study's summary: each arm of a comparison at its own best LR, not only at
the shared one.

The workflow trains the grid (the lr_grid family, tapernorm.workflow.training.lr_grid: the
pre-training recipe with `train.lr` set to each LR of the grid, results/runs/lr_grid/
<variant>-d<width>-s<seed>-lr<lr>/); `tapernorm lr-grid` summarises the finished runs
(`lr_grid.csv`, `lr_grid.md`, `lr_grid.json`): each cell's mean validation loss over its seeds,
each variant's best LR, and each variant's gap to its matched baseline (variants.baseline_of) at the
shared LR (the pre-training family's) and with both arms at their best LR. docs/norm-free.md has
the command.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ...config import ConfigError
from ...runtime import bookkeeping
from ...variants import VARIANTS, baseline_of
from ..runs import shards_meta
from ..stats import gap_pct


@dataclass(frozen=True)
class GridRun:
    variant: str
    width: int
    seed: int
    lr: float

    @property
    def name(self) -> str:
        return f"{self.variant}-d{self.width}-s{self.seed}-lr{self.lr:g}"


def _setting(cfg: dict, path: Path, key: str):
    """`cfg`'s dotted `key` ('model.n_embd'); ConfigError naming the file if it lacks it."""
    value = cfg
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(
                f"lr-grid: {path} has no {key}: not a run config of tapernorm train (retrain "
                "that run, or leave its directory out of --runs)"
            )
        value = value[part]
    return value


def read_runs(run_dirs: list[Path]) -> dict[GridRun, Path]:
    """{GridRun: its directory} of finished grid runs, each identified by its config.json (variant,
    width, seed, peak LR); a run without eval.json, or two runs of one cell, are refused."""
    runs: dict[GridRun, Path] = {}
    for run_dir in map(Path, run_dirs):
        if not (run_dir / "eval.json").is_file():
            raise ConfigError(f"lr-grid: run {run_dir} has no eval.json (not finished)")
        path = run_dir / "config.json"
        cfg = bookkeeping.read(bookkeeping.RUN_RECORD, path)
        key = (_setting(cfg, path, k) for k in ("variant", "model.n_embd", "seed", "train.lr"))
        variant, width, seed, lr = key
        run = GridRun(variant, int(width), int(seed), float(lr))
        if run in runs:
            raise ConfigError(f"lr-grid: {run_dir} and {runs[run]} are the same cell and seed")
        runs[run] = run_dir
    if not runs:
        raise ConfigError("lr-grid: no runs given")
    return runs


def check_grid(runs: dict[GridRun, Path], shared_lr: float) -> None:
    """ConfigError unless `runs` fill their grid (every variant and width at every LR and seed
    that any run has: a missing run would leave its cell's mean, and the gaps, on fewer seeds or
    none) and the shared LR is one of the grid's."""
    variants = sorted({(r.variant, r.width) for r in runs})
    lrs, seeds = sorted({r.lr for r in runs}), sorted({r.seed for r in runs})
    missing = [
        GridRun(v, w, seed, lr).name
        for v, w in variants
        for lr in lrs
        for seed in seeds
        if GridRun(v, w, seed, lr) not in runs
    ]
    if missing:
        shown = ", ".join(missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        total = len(variants) * len(lrs) * len(seeds)
        raise ConfigError(
            f"lr-grid: the grid is incomplete: {len(missing)} of {total} runs missing ({shown}): "
            "train them (the workflow's lr_grid family) and give every run directory to --runs"
        )
    if shared_lr not in lrs:
        raise ConfigError(
            f"lr-grid: --shared-lr {shared_lr:g} is not an LR of the grid "
            f"({', '.join(f'{lr:g}' for lr in lrs)}): give one of them"
        )


def summarize(runs: dict[GridRun, Path], shared_lr: float) -> tuple[list[dict], list[dict]]:
    """(cells, gaps) of runs {GridRun: directory}: per (variant, lr) the seeds' validation losses,
    mean and std; per compared variant its gap to the matched baseline at the shared LR and with
    both at their best LR."""
    losses: dict[tuple[str, float], list[float]] = {}
    for run, run_dir in runs.items():
        result = bookkeeping.read(bookkeeping.RUN_RESULT, Path(run_dir) / "eval.json")
        loss = math.inf if result["diverged"] else float(result["val_loss"])
        losses.setdefault((run.variant, run.lr), []).append(loss)
    cells = [
        {
            "variant": v,
            "label": VARIANTS[v]["label"],
            "lr": lr,
            "seeds": len(vals),
            "diverged": sum(not math.isfinite(x) for x in vals),
            "val_loss_mean": _mean(vals),
            "val_loss_std": statistics.stdev(vals) if len(vals) > 1 and _finite(vals) else math.nan,
            "val_losses": " ".join(f"{x:.4f}" for x in vals),
        }
        for (v, lr), vals in losses.items()
    ]
    best = {}
    for cell in cells:
        if (
            cell["variant"] not in best
            or cell["val_loss_mean"] < best[cell["variant"]]["val_loss_mean"]
        ):
            best[cell["variant"]] = cell
    mean = {(c["variant"], c["lr"]): c["val_loss_mean"] for c in cells}
    gaps = []
    for variant in best:
        base = baseline_of(variant)
        if base is None or base not in best:
            continue
        gaps.append(
            {
                "variant": variant,
                "label": VARIANTS[variant]["label"],
                "against": VARIANTS[base]["label"],
                "shared_lr": shared_lr,
                "gap_shared_pct": _gap(mean.get((variant, shared_lr)), mean.get((base, shared_lr))),
                "best_lr": best[variant]["lr"],
                "baseline_best_lr": best[base]["lr"],
                "gap_best_pct": _gap(best[variant]["val_loss_mean"], best[base]["val_loss_mean"]),
            }
        )
    return cells, gaps


def _finite(vals: list[float]) -> bool:
    return all(math.isfinite(x) for x in vals)


def _mean(vals: list[float]) -> float:
    return statistics.fmean(vals) if _finite(vals) else math.inf


def _gap(loss: float | None, base: float | None) -> float:
    """gap_pct, nan where a cell is missing, inf where one diverged."""
    if loss is None or base is None:
        return math.nan
    return gap_pct(loss, base) if math.isfinite(loss) and math.isfinite(base) else math.inf


SHARED = ("model.n_embd", "model.n_layer", "model.n_head", "model.block_size", "train.steps")
BATCH = "the batch (train.batch_size × train.grad_accum)"


def _shared(run_dir: Path) -> dict:
    """The settings of `run_dir`'s config.json that every run of one grid shares."""
    path = Path(run_dir) / "config.json"
    cfg = bookkeeping.read(bookkeeping.RUN_RECORD, path)
    batch = _setting(cfg, path, "train.batch_size") * _setting(cfg, path, "train.grad_accum")
    return {**{key: _setting(cfg, path, key) for key in SHARED}, BATCH: batch}


def grid_scale(runs: dict[GridRun, Path], data_dir: str) -> dict:
    """What the grid's runs share (everything but the variant, seed and LR, from their
    config.json): the scale a reader of its numbers, and the claims that quote them, must match.
    ConfigError naming two runs that differ in it."""
    dirs = list(runs.values())
    first = _shared(dirs[0])
    for run_dir in dirs[1:]:
        other = _shared(run_dir)
        for key in (k for k in first if first[k] != other[k]):
            raise ConfigError(
                f"lr-grid: runs {dirs[0]} and {run_dir} differ in {key} ({first[key]} and "
                f"{other[key]}): a grid compares LRs at one scale; give --runs of one grid"
            )
    return {
        "corpus": (shards_meta(data_dir) or {}).get("corpus"),
        **{key.split(".")[1]: first[key] for key in SHARED},
        "batch_size": first[BATCH],
        "seeds": sorted({run.seed for run in runs}),
        "lrs": sorted({run.lr for run in runs}),
    }


def write_summary(
    cells: list[dict], gaps: list[dict], out: Path, command: str, scale: dict | None = None
) -> list[Path]:
    """lr_grid.csv (the cells), lr_grid.md (both tables, the command that made them) and
    lr_grid.json (cells, gaps, the runs' shared scale and what made them; a non-finite number as
    null, named under its object's "non_finite": an infinite mean is a cell whose every seed
    diverged, which `diverged` counts)."""
    import pandas as pd

    from ...runtime.markdown import pipe_table
    from ...runtime.output_set import OutputSet, json_bytes, marker_path
    from ...runtime.provenance import made

    cell_df = pd.DataFrame(cells).sort_values(["variant", "lr"])
    csv, md, js = out / "lr_grid.csv", out / "lr_grid.md", out / "lr_grid.json"
    record = {
        "command": command,
        "made": made(),
        "scale": scale,
        "cells": cells,
        "gaps": gaps,
    }
    files = OutputSet(marker_path(out / "lr_grid"), "tapernorm lr-grid")
    # lr_grid.json first: by it lr-grid knows the directory as its own when it writes again
    files.add(js, json_bytes(record))
    files.add(csv, cell_df.to_csv(index=False).encode())
    lines = [
        "# Learning-rate grid",
        "",
        f"Made by `{command}`. Validation loss at the last step, mean ± std over seeds (inf: every "
        "seed diverged); gaps relative to the matched baseline (the same head).",
        "",
    ]
    rows = []
    for c in cell_df.to_dict("records"):
        std = "" if math.isnan(c["val_loss_std"]) else f" ± {c['val_loss_std']:.4f}"
        div = f" ({c['diverged']} diverged)" if c["diverged"] else ""
        rows.append([c["label"], f"{c['lr']:g}", c["seeds"], f"{c['val_loss_mean']:.4f}{std}{div}",
                     c["val_losses"]])  # fmt: skip
    lines += pipe_table(["variant", "LR", "seeds", "val loss", "per seed"], rows)
    lines.append("")
    lines += pipe_table(
        ["variant", "against", "gap at the shared LR", "best LR (baseline's)",
         "gap, each at its best LR"],
        [[g["label"], g["against"], f"{g['gap_shared_pct']:+.2f}% (LR {g['shared_lr']:g})",
          f"{g['best_lr']:g} ({g['baseline_best_lr']:g})", f"{g['gap_best_pct']:+.2f}%"]
         for g in gaps],
    )  # fmt: skip
    files.add(md, ("\n".join(lines) + "\n").encode())
    files.commit()
    return [csv, md, js]
