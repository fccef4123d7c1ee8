"""Figure 5: the decode speedups of the folded and explicit-scaling exports (and DyT) over the
baseline, per batch and prompt length, from the CSVs of `tapernorm bench decode`; the tables and
the helpers it shares with them are tapernorm.analysis.tables.inference'.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from .. import paper
from ..tables.inference import (
    DISTURBED,
    LABELS,
    NOT_TIMED,
    disturbed_note,
    load_bench,
    scale_note,
    shown,
    skipped_notes,
    timed,
    timed_cells,
    times,
    where,
)
from .style import COLOR_NAMES, COLORS, MARKER_NAMES, caption_text, save_figure

# the figures' colour-blind-safe colours: explicit and folded are exports of Internal-Taper (+aux)
SPEEDUP_COLORS = {
    "explicit": COLORS["internal_aux"],
    "folded": COLORS["internal"],
    "dyt": COLORS["dyt"],
}
SPEEDUP_MARKERS = {"explicit": "o", "folded": "s", "dyt": "^"}


def _speedup_bars(ax, part: list[tuple[float, object]], v: str, disturbed: bool, label: bool):
    """Median markers with quartile bars at (x, row) pairs `part`; hollow when disturbed."""
    ax.errorbar(
        [x for x, _ in part],
        [r.speedup for _, r in part],
        yerr=[
            [r.speedup - r.speedup_q1 for _, r in part],
            [r.speedup_q3 - r.speedup for _, r in part],
        ],
        fmt=SPEEDUP_MARKERS[v],
        ms=6,
        capsize=3,
        color=SPEEDUP_COLORS[v],
        mfc="white" if disturbed else SPEEDUP_COLORS[v],
        alpha=0.6 if disturbed else 1.0,
        label=(f"{LABELS[v]}, {DISTURBED} disturbed timing (hollow)" if disturbed else LABELS[v])
        if label
        else None,
    )


def best_cells(
    df: pd.DataFrame, variants: Sequence[str]
) -> dict[str, tuple[tuple[int, int], object]]:
    """Per variant, the (B, prompt) cell with the largest median speedup and its row."""
    cells = timed_cells(df, ["batch", "prompt_len"])
    out = {}
    for v in variants:
        mine = [(cell, c[v]) for cell, c in cells.items() if v in c]
        if mine:
            out[v] = max(mine, key=lambda item: item[1].speedup)
    return out


def fig5(df: pd.DataFrame) -> tuple[Figure, str]:
    """Speedup of explicit scaling and folded (and DyT) over the baseline per (B, prompt) cell, one
    panel per mode (eager, compiled); right of each panel our best cell beside the paper's "up to"
    headline speedups, which are maxima over the paper's grid: max against max."""
    df = df[df["benchmark"] == "decode"]
    if df.empty:
        raise ValueError("fig5 needs decode benchmark rows (tapernorm bench decode)")
    modes, variants = [m for m in ("eager", "compiled") if m in set(df["mode"])], shown(df)[1:]
    notes = skipped_notes(df)
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=(4.6 * len(modes) + 2.2, 4.2), layout="constrained")
        axes = fig.subplots(1, len(modes), squeeze=False, sharey=True)[0]
    labelled: set[tuple[str, bool | str]] = set()  # (variant, disturbed or "paper") in the legend
    bests = []
    for ax, mode in zip(axes, modes, strict=True):
        part_df = df[df["mode"] == mode]
        cells = sorted(timed_cells(part_df, ["batch", "prompt_len"]).items())
        best = best_cells(part_df, variants)
        _plot_speedups(ax, cells, best, variants, labelled)
        _frame_panel(ax, cells, mode, notes)
        bests.append(f"{mode}: " + (_best_text(best) or NOT_TIMED))
    axes[0].set_ylabel("speedup over the baseline (×)")
    _legend_ours_first(fig, axes)
    return fig, _fig5_caption(df, variants, bests, notes)


def _columns(cells: list) -> tuple[float, float]:
    """The x positions of a panel's "our best cell" and "paper: up to" columns, right of its
    `cells`."""
    return len(cells) + 0.2, len(cells) + 1.1


def _plot_speedups(ax, cells: list, best: dict, variants: Sequence[str], labelled: set) -> None:
    """Per variant, side by side: its speedup in each cell, in its best cell and the paper's
    headline (black edge); each legend entry labelled once over the panels (`labelled`)."""
    best_x, paper_x = _columns(cells)
    for j, v in enumerate(variants):
        dx = (j - (len(variants) - 1) / 2) * 0.25
        mine = [(i + dx, c[v]) for i, (_, c) in enumerate(cells) if v in c]
        if v in best:
            mine.append((best_x + dx, best[v][1]))
        for disturbed in (False, True):
            part = [(x, r) for x, r in mine if bool(r.disturbed) == disturbed]
            if part:
                _speedup_bars(ax, part, v, disturbed, (v, disturbed) not in labelled)
                labelled.add((v, disturbed))
        if v in paper.DECODE_SPEEDUP:
            ax.plot(
                [paper_x + dx],
                [paper.DECODE_SPEEDUP[v]],
                SPEEDUP_MARKERS[v],
                ms=7,
                color=SPEEDUP_COLORS[v],
                mec="black",
                label=f"paper: {LABELS[v]}, up to {paper.DECODE_SPEEDUP[v]}× (black edge)"
                if (v, "paper") not in labelled
                else None,
            )
            labelled.add((v, "paper"))


def _frame_panel(ax, cells: list, mode: str, notes: list[str]) -> None:
    """A panel's ticks, divider, baseline line, title and the note on the models not timed."""
    best_x, paper_x = _columns(cells)
    if notes:  # the models not timed, named in the panel
        ax.text(
            0.02,
            0.02,
            "\n".join(notes),
            transform=ax.transAxes,
            fontsize=7,
            va="bottom",
            wrap=True,
            bbox={"facecolor": "white", "edgecolor": "0.6", "alpha": 0.9},
        )
    ticks = [f"B={B}\nP={P}" for (B, P), _ in cells] + ["our best\ncell", "paper:\nup to"]
    ax.set_xticks([*range(len(cells)), best_x, paper_x], ticks, fontsize=8)
    ax.axvline(len(cells) - 0.4, color="0.5", lw=1)
    ax.set_xlim(-0.6, paper_x + 0.5)
    ax.axhline(1.0, color="0.3", lw=1)
    ax.set_title(f"decode speedup, {mode}", fontsize=10)
    ax.set_xlabel("batch B, prompt length P")


def _best_text(best: dict) -> str:
    """'Folded 1.31× at B=1 P=32, ...': each variant's best cell of a mode ('' if none)."""
    return ", ".join(
        f"{LABELS[v]} {times(row.speedup)} at B={B} P={P}" + (f" {DISTURBED}" * row.disturbed)
        for v, ((B, P), row) in best.items()
    )


def _legend_ours_first(fig: Figure, axes) -> None:
    """One legend beside the panels, each label once: our entries, then the paper's."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("paper:"))  # ours first
    fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="outside right upper",
        fontsize=8,
    )


def _fig5_caption(
    df: pd.DataFrame, variants: Sequence[str], bests: list[str], notes: list[str]
) -> str:
    headline = paper.DECODE_SPEEDUP
    return caption_text(
        "**Figure 5.** Decode speedup over the RMSNorm baseline of explicit scaling and folded "
        + ("(and DyT, the norm-free alternative timed as it is) " if "dyt" in variants else "")
        + "per batch size B and prompt length P, greedy decoding"
        + (f" of {int(timed(df)['new_tokens'].iloc[0])} tokens" if not timed(df).empty else "")
        + ", one panel per mode. Left of the vertical line, per cell: the median over "
        "interleaved rounds of t_baseline / t_export (marker) and the quartiles of those per-round "
        "ratios (bar). Right of it: our best cell, the largest per-cell median in that mode (with its "
        'quartiles), beside the paper\'s headline (black-edged markers), which says "up to": a '
        "maximum over the paper's own grid, whose cells it does not publish. So the comparison is "
        "max against max; the per-cell markers have no paper counterpart.",
        (
            "Key",
            "; ".join(
                f"{LABELS[v]}: {COLOR_NAMES[SPEEDUP_COLORS[v]]}, {MARKER_NAMES[SPEEDUP_MARKERS[v]]}"
                for v in variants
            )
            + "; filled: an undisturbed timing, hollow: a disturbed one; black edge: the paper's.",
        ),
        ("Best cells here", "; ".join(bests) + "."),
        (
            "Paper",
            f"{paper.DECODE_SOURCE}, KV-cached decoding, headline only: up to "
            f"{headline['explicit']:.2f}× (explicit scaling) and {headline['folded']:.2f}× "
            "(folded) on an H100 in bf16; its protocol is not known, the protocol here is ours.",
        ),
        ("Where", f"Ours: {where(df)}. {scale_note(df)}" if not timed(df).empty else ""),
        ("Not timed", "; ".join(notes) + "." if notes else ""),
        ("Disturbed timings", disturbed_note(df).strip()),
    )


def make_fig5(
    bench_csvs: Sequence[str | Path],
    out: str | Path,
    stamp: str | None = None,
    command: str = "tapernorm figure",
) -> list[Path]:
    """Figure 5 from decode benchmark CSVs, saved as <out stem>.pdf, .png and .html (an output
    set; `command` the one its marker says to rerun)."""
    fig, caption = fig5(load_bench(bench_csvs))
    return save_figure(fig, out, caption, stamp, command)
