"""Figure 4 (gradient norms before clipping, the paper's variants and those beyond the paper) and
figure 4b (the scale-anchor ablation's gradient norms, before and after clipping, where claim 5 is
judged), with the direction text that says whether the runs without a final norm end with smaller
gradient norms than those with one, as in the paper."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from ...variants import PAPER_VARIANTS
from .. import paper
from ..runs import CLIPPED_COLUMNS, END_FRACTION, GRAD_COLUMNS, end_window, variant_order
from ..stats import gradient_ratios
from .curves import plot_variants, runs_at_width, scale_title, slice_text
from .style import bands_text, caption_text, new_rows, style_key, variant_groups

GRAD_TITLES = {
    "grad_attn_qkv": "attention QKV",
    "grad_attn_out": "attention $W_o$",
    "grad_mlp_in": "MLP $W_1$",
    "grad_mlp_out": "MLP $W_2$",
}


def _grad_row(
    row: SubFigure,
    axes: list[Axes],
    runs: pd.DataFrame,
    metrics: pd.DataFrame,
    columns: Sequence[str],
    variants: Sequence[str],
    title: str,
) -> None:
    """One row of gradient-norm panels (one per weight type, log y) with its title and legend."""
    for ax, column in zip(axes, columns, strict=True):
        plot_variants(ax, runs, metrics, column, variants, log=True)
        ax.set_title(GRAD_TITLES[column.removesuffix("_clipped")], fontsize=10)
    axes[0].set_ylabel("gradient Frobenius norm")
    row.suptitle(title, fontsize=10)


def _figure_legend(fig: Figure, axes: Sequence[Axes]) -> None:
    """One legend beside the figure with every curve labelled in `axes` (each label once)."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside right upper", fontsize=8)


def end_gradients(runs: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame | None:
    """Mean over the non-diverged runs of each paper variant (rows) of the end gradient norm of each
    weight type (columns `columns`); None unless all six paper variants have them."""
    ok = runs[~runs["diverged"]]
    if set(PAPER_VARIANTS) - set(ok["variant"]):
        return None
    g = ok.groupby("variant")[[f"{c}_end" for c in columns]].mean()
    return None if g.isna().any().any() else g


def _x_range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def _claim5_ratios(runs: pd.DataFrame, columns: Sequence[str]) -> str:
    """The ratios claim 5 compares, over the weight types, of the non-diverged runs' end means:
    no-final-norm over final-norm runs ((Final + All) / (Baseline + Internal)) and All-Taper (+aux)
    over Internal-Taper (+aux); '' unless all six paper variants have them."""
    g = end_gradients(runs, columns)
    if g is None:
        return ""
    split, close = gradient_ratios(g.T)  # per weight type
    return (
        f"no-final/final-norm {_x_range(split)}, "
        f"All-Taper (+aux)/Internal-Taper (+aux) {_x_range(close)}"
    )


def direction_text(runs: pd.DataFrame, columns: Sequence[str]) -> str:
    """Whether the runs without a final norm (Final-Taper, All-Taper) end with smaller gradient norms
    than those with one (Baseline, Internal-Taper), as in the paper's Fig. 4, or larger (the opposite),
    per weight type, from the end means; '' unless all six paper variants have them."""
    g = end_gradients(runs, columns)
    if g is None:
        return ""
    split, _ = gradient_ratios(g.T)
    lo, hi = paper.FIG4_NO_FINAL_NORM_GRAD
    no_final = g.loc[["final", "all"]]
    here = (
        f"(Final + All) / (Baseline + Internal) = {_x_range(split)} over the {len(split)} weight "
        f"types (means over the last {END_FRACTION:.0%} of logged steps; Final-Taper and "
        f"All-Taper end at {no_final.min().min():.3g}-{no_final.max().max():.3g})"
    )
    paper_says = f"in the paper's Fig. 4 they decay toward ~{lo}-{hi}"
    if (split > 1).all():
        return (
            "**The opposite of the paper's Fig. 4:** here the runs without a final norm end with "
            f"LARGER gradient norms than the runs with one, {here}; {paper_says}."
        )
    if (split < 1).all():
        return (
            f"As in the paper's Fig. 4, the runs without a final norm end with smaller gradient "
            f"norms than the runs with one: {here}; {paper_says}."
        )
    return (
        "Mixed: the runs without a final norm end with larger gradient norms than the runs with "
        f"one for some weight types and smaller for others, {here}; {paper_says}."
    )


def fig4(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Gradient norms before clipping of the four weight types (averaged over blocks) vs step, log y:
    one row for the paper's variants, one for DyT and the untied-head runs."""
    runs, metrics, width = runs_at_width(run_dirs, width)
    groups = variant_groups(runs["variant"])
    fig, rows, axes = new_rows(len(groups), len(GRAD_COLUMNS), (17, 3.9 * len(groups) + 0.6))
    for i, (row, row_axes, (title, variants)) in enumerate(zip(rows, axes, groups, strict=True)):
        _grad_row(row, row_axes, runs, metrics, GRAD_COLUMNS, variants, f"({'ab'[i]}) {title}")
    _figure_legend(fig, [row_axes[0] for row_axes in axes])
    fig.suptitle(f"Gradient norms before clipping ({scale_title(runs)})", fontsize=11)
    variants = variant_order(runs["variant"])
    direction = direction_text(runs, GRAD_COLUMNS)
    caption = caption_text(
        "**Figure 4.** Gradient Frobenius norms before clipping, averaged over blocks, vs step (log "
        f"scale) at {scale_title(runs)}, one panel per weight type: (a) the paper's variants"
        + (
            "; (b) DyT and the untied-head runs it is matched against, on axes of their own"
            if len(groups) > 1
            else ""
        )
        + ". Claim 5 is judged on the scale-anchor ablation (Figure 4b).",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("Direction", direction),
        (
            "Paper",
            f"{paper.FIG4_SOURCE}: without an anchor, no-final-norm gradient norms decay toward "
            f"~{paper.FIG4_NO_FINAL_NORM_GRAD[0]}-{paper.FIG4_NO_FINAL_NORM_GRAD[1]}; with the "
            "scale loss All-Taper matches Internal-Taper.",
        ),
    )
    return fig, caption


def _end_window_start(metrics: pd.DataFrame) -> float:
    """The first step of the earliest run's 'end' window (its last 10% of logged steps)."""
    starts = []
    for _, steps in metrics.groupby("run")["step"]:
        steps = steps.sort_values()
        starts.append(steps.iloc[-end_window(len(steps))])
    return float(min(starts))


def fig4b(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Gradient norms of the scale-anchor ablation (where claim 5 is judged) per weight type, before
    clipping and (where logged) after clipping, the paper's six variants; the end window that claim 5
    averages is shaded."""
    runs, metrics, width = runs_at_width(run_dirs, width)
    runs = runs[runs["variant"].isin(PAPER_VARIANTS)]
    if runs.empty:
        raise ValueError(f"fig4b needs runs of the paper's variants {PAPER_VARIANTS} at d={width}")
    metrics = metrics[metrics["run"].isin(runs["run"])]
    conventions = [("before clipping", GRAD_COLUMNS)]
    if all(c in metrics and metrics[c].notna().any() for c in CLIPPED_COLUMNS):
        conventions.append(("after clipping", CLIPPED_COLUMNS))
    variants = variant_order(runs["variant"])
    fig, rows, axes = new_rows(
        len(conventions), len(GRAD_COLUMNS), (17, 3.9 * len(conventions) + 0.8)
    )
    end = _end_window_start(metrics) if len(metrics) else None  # (None: nothing logged)
    ratios = []
    for i, (row, row_axes, (name, columns)) in enumerate(zip(rows, axes, conventions, strict=True)):
        _grad_row(row, row_axes, runs, metrics, columns, variants, f"({'ab'[i]}) {name}")
        for ax in row_axes if end is not None else ():
            ax.axvspan(end, metrics["step"].max(), color="0.88", zorder=0, lw=0)
        text = _claim5_ratios(runs, columns)
        if text:
            ratios.append(f"{name}: {text}")
    _figure_legend(fig, [axes[0][0]])
    data = slice_text(runs)
    fig.suptitle(f"Scale-anchor ablation: gradient norms ({scale_title(runs)}{data})", fontsize=11)
    caption = caption_text(
        "**Figure 4b** (not in the paper). Gradient Frobenius norms of the scale-anchor ablation's "
        f"runs ({scale_title(runs)}{data}), where claim 5 is judged, averaged over blocks, vs step (log "
        "scale), one panel per weight type: "
        + (
            "(a) before gradient clipping, (b) after it."
            if len(conventions) > 1
            else "before clipping."
        )
        + f" Grey: the end window (the last {END_FRACTION:.0%} of logged steps) whose means claim 5 "
        "compares.",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("Claim 5's ratios here", "; ".join(ratios) + "." if ratios else ""),
        ("Direction (before clipping)", direction_text(runs, GRAD_COLUMNS)),
    )
    return fig, caption
