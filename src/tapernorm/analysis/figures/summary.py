"""Figures of summaries rather than runs: the claims' paired gaps as a forest plot (from
results/claims.json, the numbers the claims rows carry), the LR grid as validation loss vs
peak LR per variant (from the committed grid's lr_grid.json) and the tails battery side by side
(figures.tails, from the JSON of `tapernorm tails`). Each returns (Figure, caption) like
training.py's; make_summary_figure saves one as .pdf, .png and .html."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ...runtime import bookkeeping
from ...runtime.output_set import check_member
from ...variants import VARIANTS
from ..claims.numbers import PAIRED_GAP
from .style import COLOR_NAMES, COLORS, MARKERS, caption_text, new_figure, save_figure
from .tails import fig_tails

GAP_CLAIMS = ("1.", "2.", "TaperNorm vs DyT")  # the rows whose paired gaps the forest plot draws


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}%"


def gap_rows(record: dict) -> tuple[list[dict], dict | None]:
    """(every paired-gap part of claims 1, 2 and the DyT row, each with its claim's name and
    verdict; claims 1 and 2's criterion) of a claims.json record."""
    rows, criterion = [], None
    for claim in record["claims"]:
        if not claim["Claim"].startswith(GAP_CLAIMS):
            continue
        numbered = claim["Claim"][0].isdigit()
        name = f"Claim {claim['Claim'].split('.')[0]}" if numbered else "TaperNorm vs DyT"
        if numbered and claim.get("criterion"):
            criterion = {"low": claim["criterion"]["low"], "high": claim["criterion"]["high"]}
        for part in claim.get("parts") or []:
            if part.get("kind") == PAIRED_GAP and part["estimate"] is not None:
                drawn = {k: part[k] for k in ("variant", "estimate", "ci_low", "ci_high")}
                rows.append({**part, **drawn, "claim": name, "verdict": claim["grade"]})
    return rows, criterion


def fig_claim_gaps(claims_json: str | Path) -> tuple[Figure, str]:
    """Forest plot: each paired validation-loss gap of claims 1, 2 and the DyT row (mean over seed
    pairs, its 95% t interval), against the ±2% band of claims 1 and 2's criterion."""
    # claims.md, .html and .json written together
    record = bookkeeping.read(bookkeeping.CLAIMS_RECORD, check_member(claims_json))
    with bookkeeping.consuming(bookkeeping.CLAIMS_RECORD, claims_json):
        rows, criterion = gap_rows(record)
    if not rows:
        raise ValueError(f"{claims_json}: no paired gaps in claims 1, 2 or the DyT row")
    fig, (ax,) = new_figure(1, 1, (8.5, 1.2 + 0.55 * len(rows)))
    band = None
    if criterion and criterion["low"] is not None and criterion["high"] is not None:
        ax.axvspan(criterion["low"], criterion["high"], color="0.88", zorder=0)
        band = f"±{criterion['high']:g}%"
        ax.text(criterion["high"], -0.7, f" criterion {band}", fontsize=8, va="center", color="0.3")
    ax.axvline(0.0, color="0.3", lw=1, ls=":")
    drawn = []
    for y, row in enumerate(rows):
        color, marker = COLORS[row["variant"]], MARKERS[row["variant"]]
        lo, hi = row["ci_low"], row["ci_high"]
        xerr = None if lo is None else [[row["estimate"] - lo], [hi - row["estimate"]]]
        ax.errorbar(
            row["estimate"], y, xerr=xerr, fmt=marker, color=color, mfc="white", mew=1.5, ms=8,
            capsize=4, lw=1.5,
        )  # fmt: skip
        interval = f"[{_pct(lo)}, {_pct(hi)}]" if lo is not None else "no interval"
        drawn.append(
            f"{row['claim']}, {row['label']}: {_pct(row['estimate'])} {interval} "
            f"({row['n_seeds']} seed pair{'s' * (row['n_seeds'] != 1)}; the row: {row['verdict']})"
        )
    ax.set_yticks(range(len(rows)), [f"{r['claim']}\n{r['label']}" for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -1.2)
    ax.set_xlabel("validation-loss gap to the matched baseline, paired by seed (%)")
    ax.set_title("Paired gaps of claims 1, 2 and TaperNorm vs DyT", fontsize=10)
    key = "; ".join(
        f"{VARIANTS[v]['label']}: {COLOR_NAMES[COLORS[v]]}"
        for v in dict.fromkeys(r["variant"] for r in rows)
    )
    caption = caption_text(
        "**Claims' paired gaps** (not in the paper). Each marker is a variant's validation-loss gap "
        "to its matched baseline, the mean over seed pairs (seed s of both: the same "
        "initialisation and batches), with its 95% t interval (none with one pair), as "
        "results/claims.json carries them; shaded: claims 1 and 2's criterion"
        + (f" (the interval inside {band})" if band else "")
        + "; dotted: no gap. The DyT row's gaps are at the shared LR (its verdict, with an LR grid, "
        "judges each arm at its best LR: claims.md).",
        ("Drawn", "; ".join(drawn) + "."),
        ("Key", key + "."),
    )
    return fig, caption


def _seed_losses(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, lr, seed) from the cells' per-seed losses (inf: diverged)."""
    rows = []
    for c in cells.itertuples(index=False):
        for i, text in enumerate(str(c.val_losses).split()):
            rows.append({"variant": c.variant, "lr": c.lr, "seed": i, "loss": float(text)})
    return pd.DataFrame(rows)


def fig_lr_grid(grid_json: str | Path) -> tuple[Figure, str]:
    """Validation loss at the last step vs peak LR (log x) per variant of the LR grid: each seed a
    point, the line their mean; the shared LR and each arm's best LR marked."""
    grid = bookkeeping.read(bookkeeping.LR_GRID, check_member(grid_json))
    cells, gaps = pd.DataFrame(grid["cells"]), grid["gaps"]
    if cells.empty:
        raise ValueError(f"{grid_json}: no cells")
    with bookkeeping.consuming(bookkeeping.LR_GRID, grid_json):
        seeds = _seed_losses(cells)
        best = {g["variant"]: g["best_lr"] for g in gaps}
        for g in gaps:  # the matched baseline's best LR
            base = next(v for v, s in VARIANTS.items() if s["label"] == g["against"])
            best[base] = g["baseline_best_lr"]
        shared = sorted({g["shared_lr"] for g in gaps})
    finite = seeds[seeds["loss"].map(math.isfinite)]
    fig, (ax,) = new_figure(1, 1, (7.5, 4.8))
    for lr in shared:
        ax.axvline(lr, color="0.4", ls=":", lw=1.2, label=f"shared LR {lr:g}")
    described = []
    for variant in dict.fromkeys(cells["variant"]):
        color, marker = COLORS[variant], MARKERS[variant]
        label = VARIANTS[variant]["label"]
        mine = finite[finite["variant"] == variant]
        sns.lineplot(
            data=mine, x="lr", y="loss", estimator="mean", errorbar=None, ax=ax, color=color,
            marker=marker, mfc="white", markeredgecolor=color, mew=1.5, ms=7, label=label,
            legend=False,
        )  # fmt: skip
        ax.scatter(mine["lr"], mine["loss"], s=12, color=color, alpha=0.6, lw=0, zorder=3)
        mean = cells[cells["variant"] == variant].set_index("lr")["val_loss_mean"]
        if variant in best and pd.notna(mean.get(best[variant])):
            ax.plot(
                [best[variant]], [mean[best[variant]]], "o", ms=17, mfc="none", mec=color, mew=2
            )
        diverged = seeds[(seeds["variant"] == variant) & ~seeds["loss"].map(math.isfinite)]
        for lr in diverged["lr"]:
            ax.plot([lr], [1.0], "x", color=color, ms=9, mew=2, transform=ax.get_xaxis_transform())
        described.append(_variant_text(variant, mean, best.get(variant), len(diverged)))
    ax.set_xscale("log")
    lrs = sorted(set(cells["lr"]))
    ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
    ax.minorticks_off()
    ax.set(xlabel="peak learning rate (log scale)", ylabel="validation loss at the last step")
    ax.legend(fontsize=8, loc="upper left")
    scale = grid["scale"]
    ax.set_title(
        f"LR grid: d={scale['n_embd']}, {scale['steps']:,} steps, {len(scale['seeds'])} seeds",
        fontsize=10,
    )
    gap_text = "; ".join(
        f"{g['label']} vs {g['against']}: {_pct(g['gap_shared_pct'])} at the shared LR, "
        f"{_pct(g['gap_best_pct'])} each at its best LR"
        for g in gaps
    )
    caption = caption_text(
        "**LR grid** (not in the paper). Validation loss at the last step against the peak learning "
        f"rate (log scale), from the committed grid (`{grid['command']}`): each seed a small dot, "
        "the line and hollow markers the mean over the seeds, a large ring each variant's best LR, "
        "dotted the shared LR the pre-training runs use; a diverged seed is an × at the top.",
        ("Drawn", "; ".join(described) + "."),
        ("Gaps to the matched baseline", gap_text + "."),
    )
    return fig, caption


def _variant_text(variant: str, mean: pd.Series, best: float | None, n_div: int) -> str:
    points = ", ".join(
        f"{lr:g}: {m:.4f}" if pd.notna(m) else f"{lr:g}: diverged" for lr, m in mean.items()
    )
    text = f"{VARIANTS[variant]['label']} ({COLOR_NAMES[COLORS[variant]]}) mean {points}"
    if best is not None:
        text += f", best LR {best:g}"
    return text + (f", {n_div} diverged seed(s)" if n_div else "")


SUMMARY_FIGURES: dict[str, Callable[[str | Path], tuple[Figure, str]]] = {
    "claim_gaps": fig_claim_gaps,
    "lr_grid": fig_lr_grid,
    "tails": fig_tails,
}


def make_summary_figure(
    which: str, source: str | Path, out: str | Path, stamp: str | None = None
) -> list[Path]:
    """Build summary figure `which` from its source file; save .pdf, .png and .html."""
    if which not in SUMMARY_FIGURES:
        raise ValueError(f"unknown figure {which!r}; choose from {sorted(SUMMARY_FIGURES)}")
    fig, caption = SUMMARY_FIGURES[which](source)
    return save_figure(fig, out, caption, stamp)
