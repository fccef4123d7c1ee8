"""The scaling study's figures: each claim's paired gap against tokens per parameter, beside the
paper's gap at each of its widths (Table 2, at its own tokens per parameter: paper_points), and the
validation curves of every cell with the gap over the course of training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...variants import VARIANTS
from .. import paper
from ..claims.loss import GAP_MAX_PCT
from ..figures.style import COLORS, band_name, caption_text, linestyle, new_figure, save_figure
from .scaling import GAP_CLAIMS, StudyRuns, paper_gap

WIDTH_COLORS = ("#000000", "#E69F00", "#0072B2", "#CC6677")  # Okabe-Ito / Tol: colour-blind safe
WIDTH_MARKERS = ("o", "s", "D", "^")
CLAIM_TITLES = {
    "1": "Claim 1: Internal-Taper (+aux) vs Baseline",
    "2": "Claim 2: All-Taper (+aux) vs Baseline",
    "dyt": "DyT vs Baseline (untied head)",
}
BAND_COLOR = "#009E73"
PAPER_COLOR = "0.45"  # the paper's points at widths the study does not have
PAPER_MARKER = "*"
PAPER_GID = "paper"  # gid of each paper point drawn: "paper/<claim>/d<width>"


def paper_points(claims: list[str]) -> pd.DataFrame:
    """The paper's gap of each claim at each of its widths (Table 2) at the paper's tokens per
    parameter (Table 5's steps x 16 x 512 over the size label's parameters), with its source."""
    rows = []
    for claim in claims:
        for width in sorted(paper.TABLE5_STEPS):
            found = paper_gap(claim, width)
            if found is not None:
                rows.append({"claim": claim, "width": width, "gap_pct": found[0],
                             "tokens_per_param": paper.tokens_per_param(width),
                             "version": found[1].version, "source": str(found[1])})  # fmt: skip
    columns = ["claim", "width", "gap_pct", "tokens_per_param", "version", "source"]
    return pd.DataFrame(rows, columns=columns)


def _log_ticks(ax, values: pd.Series, axis: str = "x") -> None:
    """A log axis labelled at round values within the data's range, as plain numbers (the
    default labels every minor tick in scientific notation, overlapping on a narrow range)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    getattr(ax, f"set_{axis}scale")("log")
    lo, hi = float(values.min()), float(values.max())
    # a narrow range (under 3x: a loss curve's) gets the steps between, so that it has several
    steps = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8) if hi < 3 * lo else (1, 2, 3, 5)
    if hi > 300 * lo:  # several decades (the paper's points beside ours): fewer labels
        steps = (1, 3)
    ticks = [m * 10**k for k in range(-1, 6) for m in steps if lo / 1.5 <= m * 10**k <= hi * 1.5]
    scale = getattr(ax, f"{axis}axis")
    scale.set_major_locator(FixedLocator(ticks))
    scale.set_major_formatter(lambda x, _: f"{x:g}")
    scale.set_minor_locator(NullLocator())
    scale.set_minor_formatter(NullFormatter())


def _band(ax, label: bool) -> None:
    """The paper's criterion, a gap within +-2%, shaded, and the zero line."""
    ax.axhspan(-GAP_MAX_PCT, GAP_MAX_PCT, color=BAND_COLOR, alpha=0.12, lw=0,
               label=f"±{GAP_MAX_PCT:g}% (the claims' criterion)" if label else None)  # fmt: skip
    ax.axhline(0.0, color="0.4", lw=0.8)


def _paper_marks(ax, points: pd.DataFrame, widths: list[int], label: bool) -> None:
    """The paper's points of one claim: a star per width, in the width's colour where the study
    has that width (grey where not), each named by its width."""
    style = dict(ls="none", marker=PAPER_MARKER, ms=11, mec="black", mew=0.6)
    if label and not points.empty:  # the legend's entry, in the neutral colour
        versions = "/".join(sorted(set(points["version"])))
        sizes = [f"d={w}" for w in (points["width"].min(), points["width"].max())]
        ax.plot([], [], color=PAPER_COLOR, **style,
                label=f"paper {versions} (Table 2), {'-'.join(sizes)}")  # fmt: skip
    for i, r in enumerate(points.itertuples()):
        color = WIDTH_COLORS[widths.index(r.width) % 4] if r.width in widths else PAPER_COLOR
        ax.plot([r.tokens_per_param], [r.gap_pct], color=color,
                gid=f"{PAPER_GID}/{r.claim}/d{r.width}", **style)  # fmt: skip
        ax.annotate(f"d={r.width}", (r.tokens_per_param, r.gap_pct), textcoords="offset points",
                    xytext=(0, 7 if i % 2 == 0 else -15), ha="center", fontsize=7, color="0.25")  # fmt: skip


def gap_axes(summary: pd.DataFrame):
    """(figure, axes, claims, paper points) of the gap figure: paired gap (mean, 95% interval)
    vs tokens per parameter (log x), a panel per claim, a line per width, and the paper's gap at
    each of its widths (paper_points) as stars."""
    claims = [c for c in GAP_CLAIMS if c in set(summary["claim"])]
    if not claims:
        raise ValueError("the summary has no rows of claims 1, 2 or dyt: nothing to draw")
    widths = [int(w) for w in sorted(summary.loc[summary["claim"].isin(claims), "width"].unique())]
    points = paper_points(claims)
    fig, axes = new_figure(1, len(claims), (4.2 * len(claims), 3.6), sharey=True)
    for ax, claim in zip(axes, claims, strict=True):
        _band(ax, label=ax is axes[0])
        for i, width in enumerate(widths):
            rows = summary[(summary["claim"] == claim) & (summary["width"] == width)]
            rows = rows.sort_values("tokens_per_param")
            if rows.empty:
                continue
            err = np.vstack([rows["estimate"] - rows["ci_low"], rows["ci_high"] - rows["estimate"]])
            ax.errorbar(rows["tokens_per_param"], rows["estimate"], yerr=err, capsize=3,
                        color=WIDTH_COLORS[i % 4], marker=WIDTH_MARKERS[i % 4], mfc="white",
                        label=f"d={width}")  # fmt: skip
        mine = points[points["claim"] == claim]
        _paper_marks(ax, mine, widths, label=not mine.empty and claim == points["claim"].iloc[0])
        _log_ticks(ax, pd.concat([summary["tokens_per_param"], points["tokens_per_param"]]))
        ax.set_title(CLAIM_TITLES[claim], fontsize=10)
        ax.set_xlabel("training tokens per parameter")
    axes[0].set_ylabel("validation-loss gap, paired by seed (%)")
    legend = {}  # every panel's entries, once (the paper's points may start on another panel)
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(text, handle)
    # the legend above the panels: the stamp takes the bottom line
    fig.legend(legend.values(), legend.keys(), loc="outside upper center", ncols=len(legend),
               frameon=False)  # fmt: skip
    return fig, axes, claims, points


def gap_figure(summary: pd.DataFrame, out: str | Path, stamp: str) -> list[Path]:
    """The gap figure (gap_axes) saved with its caption and stamp."""
    fig, _, claims, points = gap_axes(summary)
    n = sorted(set(summary.loc[summary["claim"].isin(claims), "n_seeds"]))
    caption = caption_text(
        "**Scaling study: the claims' gaps as training grows.** Validation-loss gap of each "
        "variant to its matched baseline, paired by seed: the mean and its 95% t interval "
        f"({'-'.join(map(str, n))} seed pairs per point), against training tokens per parameter "
        "of the baseline (log scale); one line per width. Shaded: the claims' criterion, a gap "
        f"within ±{GAP_MAX_PCT:g}%. " + _paper_caption(points),
    )
    return save_figure(fig, out, caption, stamp, "tapernorm scaling figure")


def _mean_band(ax, wide: pd.DataFrame, color: str, style: str, label: str | None) -> None:
    """The seeds' mean (one column per seed) and their band (figures.style's rule)."""
    mean = wide.mean(axis=1)
    ax.plot(wide.index, mean, color=color, ls=style, lw=1.4, label=label)
    if wide.shape[1] >= 2:
        ax.fill_between(wide.index, wide.min(axis=1), wide.max(axis=1), color=color, alpha=0.2,
                        lw=0)  # fmt: skip


def _wide(curves: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Validation loss by step (rows) and seed (columns) of one variant."""
    mine = curves[curves["variant"] == variant]
    return mine.pivot_table(index="step", columns="seed", values="val_loss")


def curves_figure(study: StudyRuns, out: str | Path, stamp: str) -> list[Path]:
    """Per (width, steps) cell: validation loss against the step (top) and each compared
    variant's paired gap to its baseline at every validation (bottom)."""
    curves = study.curves[study.curves["family"] == "scaling"]
    cells = sorted(curves.groupby(["width", "steps"]).groups)
    if not cells:
        raise ValueError("no validation records in the study's runs: nothing to draw")
    fig, axes = new_figure(2, len(cells), (3.3 * len(cells), 6.0))
    top, bottom = axes[: len(cells)], axes[len(cells) :]
    seeds = set()
    for i, (width, steps) in enumerate(cells):
        cell = curves[(curves["width"] == width) & (curves["steps"] == steps)]
        tokens = study.runs.loc[
            (study.runs["width"] == width) & (study.runs["steps"] == steps), "tokens_per_param"
        ].min()
        _band(bottom[i], label=i == 0)
        for variant in [v for v in VARIANTS if v in set(cell["variant"])]:
            wide = _wide(cell, variant)
            seeds.add(wide.shape[1])
            style = dict(color=COLORS[variant], style=linestyle(variant))
            _mean_band(top[i], wide, label=VARIANTS[variant]["label"], **style)
            against = next((b for v, b in GAP_CLAIMS.values() if v == variant), None)
            if against is not None and against in set(cell["variant"]):
                base = _wide(cell, against)
                common = wide.columns.intersection(base.columns)
                gap = 100.0 * (wide[common] / base[common] - 1.0)
                _mean_band(bottom[i], gap.dropna(), **style, label=None)
        top[i].set_title(f"d={width}, {steps:,} steps (~{tokens:.0f} tokens/param)", fontsize=9)
        _log_ticks(top[i], cell["val_loss"], axis="y")
        bottom[i].set_xlabel("step")
    top[0].set_ylabel("validation loss")
    bottom[0].set_ylabel("gap to matched baseline (%)")
    legend = {}  # every variant of any cell, once
    for ax in (*top, bottom[0]):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=3, frameon=False)
    caption = caption_text(
        "**Scaling study: validation loss during training.** Top: validation loss on the fixed "
        "validation windows at each periodic evaluation, with every TaperNorm at the gate the run "
        "held at that step (1 before the taper, 0 at the end), and the final evaluation at g=0. "
        "Bottom: each variant's gap to its matched baseline at the same step, paired by seed. "
        f"Lines: the mean over seeds; {band_name(max(seeds))}. Shaded in the bottom row: ±"
        f"{GAP_MAX_PCT:g}%.",
    )
    return save_figure(fig, out, caption, stamp, "tapernorm scaling figure")


def _paper_caption(points: pd.DataFrame) -> str:
    """What the stars are, from the points drawn (their version, widths, values, x)."""
    if points.empty:
        return "The paper has no gap of these claims (no stars)."
    versions = ", ".join(sorted(set(points["version"])))
    sources = "; ".join(sorted(set(points["source"])))
    each = "; ".join(
        f"claim {claim}: " + ", ".join(f"d={r.width} {r.gap_pct:+.2f}%" for r in rows.itertuples())
        for claim, rows in points.groupby("claim", sort=False)
    )
    lo, hi = points["tokens_per_param"].min(), points["tokens_per_param"].max()
    sizes = [paper.size_label(w) for w in sorted(set(points["width"]))]
    return (
        f"Stars: the paper's gaps ({sources}; paper {versions}), mean over its seeds, at its own "
        f"training length ({lo:,.0f}-{hi:,.0f} tokens per parameter: {paper.TABLE5_SOURCE}'s "
        f"steps x {paper.TABLE5_BATCH} x {paper.TABLE5_BLOCK} over its {sizes[0]}-{sizes[-1]} "
        "parameters), coloured as our line of the same width (grey: a width we did not train): "
        f"{each}."
    )
