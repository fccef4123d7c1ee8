"""Curves vs step shared by the figures: the runs at one width, a variant's mean over its
non-diverged seeds with its seed band (diverged runs as thin lines ending in an 'x'), the title's
scale and the captions' end values."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from ...variants import VARIANTS
from ..runs import load_runs, pick_width, variant_order
from .style import BAND_ALPHA, COLORS, line_style, seed_errorbar


def scale_title(runs: pd.DataFrame) -> str:
    """'d=64, 6 steps, 2 seeds' for the titles (seeds: runs per variant, min-max)."""
    steps = "/".join(f"{s:,}" for s in sorted(runs["steps"].unique()))
    per_variant = runs.groupby("variant").size()
    lo, hi = int(per_variant.min()), int(per_variant.max())
    seeds = f"{lo}" if lo == hi else f"{lo}-{hi}"
    widths = "/".join(str(w) for w in sorted(runs["width"].unique()))
    return f"d={widths}, {steps} steps, {seeds} seed{'s' if hi > 1 else ''}"


def slice_text(runs: pd.DataFrame) -> str:
    """', first 16,384 train tokens' where the runs train on one slice of the split, else ''."""
    tokens = runs["train_tokens"].dropna().unique()
    return f", first {int(tokens[0]):,} train tokens" if len(tokens) == 1 else ""


def runs_at_width(run_dirs, width: int | None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    runs, metrics = load_runs(run_dirs)
    runs = runs[runs["variant"].notna()]
    if runs.empty:
        raise ValueError("these figures need runs with a Table 1 variant")
    width = pick_width(runs, width)
    runs = runs[runs["width"] == width]
    return runs, metrics[metrics["run"].isin(runs["run"])], width


def plot_variant(ax: Axes, runs: pd.DataFrame, metrics: pd.DataFrame, variant: str, column: str):
    """Mean over the variant's non-diverged runs with its band over the seeds (seaborn's estimator
    and error band, figures.style.seed_errorbar); diverged runs as thin lines ending in an 'x' at
    the divergence step."""
    mine = runs[runs["variant"] == variant]
    ok, bad = mine[~mine["diverged"]], mine[mine["diverged"]]
    label = VARIANTS[variant]["label"]
    if len(bad):
        label += f" ({len(bad)}/{len(mine)} diverged, ×)"
    if column not in metrics.columns:  # nothing logged: every run diverged at step 1
        return
    rows = metrics[(metrics["variant"] == variant) & metrics[column].notna()]
    if rows.empty:  # e.g. c_f r(h) of a variant whose final norm does not taper
        return
    if len(ok):
        mine_ok = rows[rows["run"].isin(ok["run"])]
        style = line_style(variant, mine_ok["step"].nunique())
        labels = ax.get_xlabel(), ax.get_ylabel()  # (seaborn names the axes after the columns)
        sns.lineplot(
            data=mine_ok, x="step", y=column, estimator="mean", ax=ax, label=label, lw=1.5,
            errorbar=seed_errorbar(len(ok)), err_kws={"alpha": BAND_ALPHA, "lw": 0},
            legend=False, markeredgecolor=COLORS[variant], **style,
        )  # fmt: skip
        ax.set(xlabel=labels[0], ylabel=labels[1])
        label = None
    for run in bad.itertuples():
        d = rows[rows["run"] == run.run].sort_values("step")
        ax.plot(d["step"], d[column], lw=0.8, alpha=0.8, label=label, **line_style(variant, len(d)))
        label = None
        if len(d):
            ax.plot(
                [run.diverged_step], [d[column].iloc[-1]], "x", color=COLORS[variant], ms=9, mew=2
            )


def plot_variants(
    ax: Axes, runs, metrics, column: str, variants: Sequence[str] | None = None, log: bool = False
) -> None:
    """One curve per variant (`variants`, default all present) of `column` vs step."""
    for variant in variant_order(runs["variant"] if variants is None else variants):
        plot_variant(ax, runs, metrics, variant, column)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")


def legend_below(ax: Axes) -> None:
    """The axes' legend under it, so that it hides no curve."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)


def end_values(runs: pd.DataFrame, column: str, variants: Sequence[str]) -> str:
    """'Baseline 39.3, Final-Taper 59.3' (mean over the non-diverged seeds of the end values)."""
    ok = runs[~runs["diverged"]]
    means = ok.groupby("variant")[f"{column}_end"].mean()
    return ", ".join(
        f"{VARIANTS[v]['label']} {means[v]:.3g}"
        for v in variants
        if v in means and math.isfinite(means[v])
    )
