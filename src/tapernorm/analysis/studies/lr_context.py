"""Where a study's runs sit on the committed LR grid: the learning rate in their records' configs
beside the arm's best LR on the grid (`tapernorm lr-grid`, results/cpu/lr_grid), said in the rows
that quote the study (the claims' TaperNorm-vs-DyT row, the README's scaling rows), so that a gap
measured at the shared LR, far below an arm's best, says so itself (e.g. DyT at 1e-3, 32x below its
best 3.2e-2). Nothing here is typed: the LRs are read from the configs and the grid."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ...runtime import bookkeeping

GRID_BESIDE = Path("..") / "lr_grid" / "lr_grid.json"  # the committed studies side by side


def study_lrs(study_dir: str | Path, variant: str) -> list[float]:
    """The distinct learning rates in the configs of the study's records of `variant`
    (study_dir/runs/<family>/<variant>-d<width>-.../config.json), sorted."""
    lrs = set()
    for config in sorted(Path(study_dir).glob(f"runs/*/{variant}-d*/config.json")):
        train = bookkeeping.read(bookkeeping.STUDY_RECORD, config, need=("train",))["train"]
        if not bookkeeping.NUMBER.test(train.get("lr")):
            raise bookkeeping.fail(bookkeeping.STUDY_RECORD, config, "has no valid train.lr")
        lrs.add(float(train["lr"]))
    return sorted(lrs)


def committed_grid(study_dir: str | Path) -> dict | None:
    """The committed LR grid beside a committed study (results/cpu/lr_grid beside
    results/cpu/scaling), with its directory under `path`; None where there is none."""
    path = Path(os.path.normpath(Path(study_dir) / GRID_BESIDE))
    return load_lr_grid(path) if path.is_file() else None


def load_lr_grid(path: str | Path) -> dict:
    """lr_grid.json of `tapernorm lr-grid`, with its directory under `path` (to name the
    source)."""
    path = Path(path)
    return {**bookkeeping.read(bookkeeping.LR_GRID, path), "path": str(path.parent)}


def lr_note(lrs: list[float], grid: dict | None, variant: str, short: bool = False) -> str:
    """'at LR 0.001, 32x below DyT's best LR 0.032 on the LR grid (results/cpu/lr_grid: d=64, 600
    steps)' (short: 'at LR 0.001, 32x below DyT's best (LR grid)'), or where the runs are at the
    grid's best, 'at DyT's best LR 0.003 (LR grid)'; '' where the grid lacks `variant` or the runs
    have several LRs or none."""
    best = {g.get("variant"): g for g in (grid or {}).get("gaps", [])}.get(variant)
    if best is None or len(lrs) != 1 or not best.get("best_lr"):
        return ""
    lr, top = lrs[0], float(best["best_lr"])
    label = best.get("label", variant)
    scale = (grid or {}).get("scale") or {}
    where = (
        "LR grid"
        if short
        else (
            f"LR grid ({grid.get('path', 'the LR grid')}: d={scale.get('n_embd')}, "
            f"{scale.get('steps')} steps)"
        )
    )
    if math.isclose(lr, top, rel_tol=1e-9):
        return f"at {label}'s best LR {top:g} ({where})"
    factor = top / lr
    side = f"{factor:.0f}x below" if factor > 1 else f"{1 / factor:.0f}x above"
    if short:
        return f"at LR {lr:g}, {side} {label}'s best ({where})"
    return f"at LR {lr:g}, {side} {label}'s best LR {top:g} on the {where}"
