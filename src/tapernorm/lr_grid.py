"""The learning-rate grid study: each arm of a comparison at its own best LR, not only at the shared one.

A pipeline config's pre-training family is retrained with `train.lr` set to each LR of the grid, for
the variants and seeds asked for; everything else (data, steps, schedule, seeds) is the family's.
Runs live in `<out>/runs/<variant>-d<width>-s<seed>-lr<lr>/` (a finished run is reused, a killed one
resumes); the summary (`lr_grid.csv`, `lr_grid.md`) gives each cell's mean validation loss over its
seeds, each variant's best LR, and each variant's gap to its matched baseline (config.baseline_of) at
the shared LR (the config's) and with both arms at their best LR. docs/norm-free.md has the command.
"""

from __future__ import annotations

import copy
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import jsonio
from .analysis.stats import gap_pct
from .config import VARIANTS, ConfigError, baseline_of
from .pipeline import figure_width, run_config, run_name


class GridRunFailed(RuntimeError):
    """A training run of the grid exited with an error (its log says why)."""


@dataclass(frozen=True)
class GridRun:
    variant: str
    width: int
    seed: int
    lr: float

    @property
    def name(self) -> str:
        return f"{run_name(self.variant, self.width, self.seed)}-lr{self.lr:g}"


def grid_runs(
    config: dict, variants: list[str], lrs: list[float], seeds: int, width: int | None = None
) -> list[GridRun]:
    """Every (variant, seed, lr) of the grid at `width` (default: the family's figure width), the
    matched baselines of `variants` added where missing."""
    width = width or figure_width(config)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ConfigError(f"lr-grid: unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    if not lrs or any(not (math.isfinite(lr) and lr > 0) for lr in lrs):
        raise ConfigError(f"lr-grid: learning rates must be finite and > 0, got {lrs}")
    if seeds < 1:
        raise ConfigError(f"lr-grid: --seeds must be >= 1, got {seeds}")
    arms = list(dict.fromkeys([*(b for v in variants if (b := baseline_of(v))), *variants]))
    return [GridRun(v, width, s, lr) for v in arms for lr in sorted(set(lrs)) for s in range(seeds)]


def grid_run_config(config: dict, run: GridRun, data_dir: str) -> dict:
    """The pre-training family's run config of `run.variant` with train.lr = run.lr."""
    config = copy.deepcopy(config)
    fam = config["pretrain"]
    fam.update(variants=[run.variant], widths=[run.width], seeds=run.seed + 1)
    fam["train"]["lr"] = run.lr
    cfg = run_config(config, "pretrain", run_name(run.variant, run.width, run.seed), data_dir)
    cfg["name"] = f"lr_grid/{run.name}"
    return cfg


def train_missing(
    config: dict, runs: list[GridRun], data_dir: str, out: Path, jobs: int = 1
) -> list[Path]:
    """Train every run without an eval.json under out/runs (`jobs` at a time, one thread each, as the
    pipeline trains); returns the run directories. A failed run raises after the others finish."""
    out.mkdir(parents=True, exist_ok=True)
    dirs = [out / "runs" / run.name for run in runs]
    todo = [(run, d) for run, d in zip(runs, dirs, strict=True) if not (d / "eval.json").exists()]
    print(
        f"lr-grid: {len(runs)} runs, {len(runs) - len(todo)} done, {len(todo)} to train", flush=True
    )

    def train(item: tuple[GridRun, Path]) -> str | None:
        run, run_dir = item
        cfg = jsonio.dumps(grid_run_config(config, run, data_dir))
        log = out / "logs" / f"{run.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "tapernorm.cli", "train", "--config-json", cfg]
        cmd += ["--out", str(run_dir), "--threads", "1"]
        with open(log, "w") as f:
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=_one_thread()
            ).returncode
        print(
            f"lr-grid: {run.name} {'done' if rc == 0 else f'FAILED (exit {rc}; {log})'}", flush=True
        )
        return None if rc == 0 else f"{run.name} (see {log})"

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        failed = [f for f in pool.map(train, todo) if f]
    if failed:
        raise GridRunFailed(f"lr-grid: {len(failed)} runs failed: {', '.join(failed)}")
    return dirs


def _one_thread() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def summarize(runs: list[GridRun], out: Path, shared_lr: float) -> tuple[list[dict], list[dict]]:
    """(cells, gaps): per (variant, lr) the seeds' validation losses, mean and std; per compared
    variant its gap to the matched baseline at the shared LR and with both at their best LR."""
    losses: dict[tuple[str, float], list[float]] = {}
    for run in runs:
        result = jsonio.read_json(out / "runs" / run.name / "eval.json")
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


def grid_scale(config: dict, runs: list[GridRun], data_dir: str) -> dict:
    """What the grid's runs share (everything but the variant, seed and LR): the scale a reader of
    its numbers, and the claims that quote them, must match."""
    cfg = grid_run_config(config, runs[0], data_dir)
    try:
        corpus = jsonio.read_json(Path(data_dir) / "meta.json").get("corpus")
    except (OSError, ValueError, AttributeError):
        corpus = None
    return {
        "corpus": corpus,
        "n_embd": cfg["model"]["n_embd"],
        "n_layer": cfg["model"]["n_layer"],
        "n_head": cfg["model"]["n_head"],
        "block_size": cfg["model"]["block_size"],
        "steps": cfg["train"]["steps"],
        "batch_size": cfg["train"]["batch_size"] * cfg["train"]["grad_accum"],
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

    from .atomic import atomic_write_bytes
    from .provenance import git_state, host, now, versions

    cell_df = pd.DataFrame(cells).sort_values(["variant", "lr"])
    csv, md, js = out / "lr_grid.csv", out / "lr_grid.md", out / "lr_grid.json"
    record = {
        "command": command,
        "made": {**git_state(), "host": host(), "versions": versions(), "written": now()},
        "scale": scale,
        "cells": cells,
        "gaps": gaps,
    }
    jsonio.write_json(js, record)
    atomic_write_bytes(csv, cell_df.to_csv(index=False).encode())
    lines = [
        "# Learning-rate grid",
        "",
        f"Made by `{command}`. Validation loss at the last step, mean ± std over seeds (inf: every "
        "seed diverged); gaps relative to the matched baseline (the same head).",
        "",
        "| variant | LR | seeds | val loss | per seed |",
        "|---|---|---|---|---|",
    ]
    for c in cell_df.to_dict("records"):
        std = "" if math.isnan(c["val_loss_std"]) else f" ± {c['val_loss_std']:.4f}"
        div = f" ({c['diverged']} diverged)" if c["diverged"] else ""
        lines.append(
            f"| {c['label']} | {c['lr']:g} | {c['seeds']} | {c['val_loss_mean']:.4f}{std}{div} "
            f"| {c['val_losses']} |"
        )
    lines += [
        "",
        "| variant | against | gap at the shared LR | best LR (baseline's) | gap, each at its best LR |",
        "|---|---|---|---|---|",
    ]
    for g in gaps:
        lines.append(
            f"| {g['label']} | {g['against']} | {g['gap_shared_pct']:+.2f}% (LR {g['shared_lr']:g}) "
            f"| {g['best_lr']:g} ({g['baseline_best_lr']:g}) | {g['gap_best_pct']:+.2f}% |"
        )
    atomic_write_bytes(md, ("\n".join(lines) + "\n").encode())
    return [csv, md, js]
