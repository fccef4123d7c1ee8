"""Figure fig_tails (not in the paper), from the JSON record of `tapernorm tails`: (a) the models
side by side, grouped by arm (the baseline, each tapered arm at g = 0, DyT and its untied-head
baseline, the folded models), one point per seed, of the worst 5%-noisy window loss and of the
residual search's ratio (log y); (b), where the record holds models of several training lengths,
each of the two against tokens per parameter (log x) per arm, the seeds as points and their median
as a line. float32's numbers (the CSV has bfloat16's too); a number that is not finite is an x at
the top of its axes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from ...variants import VARIANTS
from ..studies.tails import arm_order, read_rows
from .style import COLOR_NAMES, COLORS, MARKER_NAMES, MARKERS, caption_text, new_rows

# the two tail metrics drawn: (column, axis label, the probe's limit as a multiple of the reference's)
PANEL_METRICS = (
    ("noise_5pct_loss_max_fp32", "worst 5%-noisy window loss", 2.0),
    ("search_ratio_fp32", "residual search ratio (h_L RMS / clean median)", 10.0),
)
# the groups of arms, each named over its arms (two lines where a group may hold only two arms)
GROUPS = ("baseline", "tapered, g = 0", "DyT and its\nuntied baseline", "folded", "other")
OTHER_COLOR, OTHER_MARKER = "#777777", "o"
JITTER = 0.28  # the width over which an arm's seeds are spread


def group_of(row: pd.Series) -> str:
    """The arm's group (GROUPS) of a row."""
    if row["kind"] == "folded":
        return GROUPS[3]
    spec = VARIANTS.get(row["variant"]) if isinstance(row["variant"], str) else None
    if spec is None:
        return GROUPS[4]
    if spec.get("norm") == "dyt" or row["variant"].endswith("_untied"):
        return GROUPS[2]
    return GROUPS[0] if spec["taper"] == "none" else GROUPS[1]


def _style(row: pd.Series) -> dict:
    """Colour and marker of the row's variant; a folded model's filled, a run's hollow."""
    variant = row["variant"] if isinstance(row["variant"], str) else None
    color = COLORS.get(variant, OTHER_COLOR)
    fill = color if row["kind"] == "folded" else "white"
    return {"color": color, "marker": MARKERS.get(variant, OTHER_MARKER), "mfc": fill}


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of models the battery measured (not a skipped fold), with their arm and group."""
    rows = rows[~rows["note"].fillna("").str.startswith("not measured")].copy()
    rows["group"] = [group_of(r) for _, r in rows.iterrows()]
    return rows


def arms(rows: pd.DataFrame) -> list[str]:
    """The arms (labels) of `rows` in GROUPS' order, then Table 1's."""
    records = sorted(
        rows.to_dict("records"), key=lambda r: (GROUPS.index(r["group"]), arm_order(r))
    )
    return list(dict.fromkeys(r["label"] for r in records))


def side_by_side(rows: pd.DataFrame) -> pd.DataFrame:
    """Panel (a)'s rows: at the largest width, of each arm its longest training."""
    rows = rows[rows["width"] == rows["width"].max()] if rows["width"].notna().any() else rows
    longest = rows.groupby("label")["steps"].transform("max")
    return rows[(rows["steps"] == longest) | longest.isna()]


def _draw_value(ax: Axes, x: float, y: float, style: dict) -> bool:
    """One point; a number that is not finite an x at the top (returns whether it was)."""
    if math.isfinite(y):
        ax.plot([x], [y], ls="none", ms=7, mew=1.4, mec=style["color"], **style)
        return False
    ax.plot([x], [0.97], "x", color=style["color"], ms=9, mew=2, transform=ax.get_xaxis_transform())
    return True


def _reference_lines(ax: Axes, rows: pd.DataFrame, column: str, factor: float) -> str:
    """The baselines' median (dotted) and the probe's limit at `factor` x it (dashed); the text
    that says so ('' without a baseline)."""
    base = rows[(rows["variant"] == "baseline") & (rows["kind"] == "run")][column]
    base = base[np.isfinite(base)]
    if base.empty:
        return ""
    median = float(base.median())
    ax.axhline(median, color="0.35", ls=":", lw=1.2, zorder=1)
    ax.axhline(factor * median, color="#BB5566", ls="--", lw=1.2, zorder=1)
    return f"{median:.3g} (limit {factor * median:.3g})"


def _plain(value: float, _position=None) -> str:
    return f"{value:g}"


def log_ticks(ax: Axes, axis: str = "y") -> None:
    """A log axis that spans under two decades in plain numbers, its minor ticks labelled too (4,
    6, 10, not 4 x 10^0); a wider one in powers of ten, its minor ticks unlabelled."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    low, high = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if low > 0 and high / low < 100:
        target.set_major_formatter(FuncFormatter(_plain))
        target.set_minor_formatter(FuncFormatter(_plain))
    else:
        target.set_minor_formatter(NullFormatter())


def _group_bands(ax: Axes, order: list[str], groups: dict[str, str]) -> None:
    """Every other group of arms shaded, each group named at the top."""
    start = 0
    names = [groups[a] for a in order]
    for i, name in enumerate(names + [None]):
        if i == len(names) or name != names[start]:
            if len(dict.fromkeys(names[:start])) % 2:
                ax.axvspan(start - 0.5, i - 0.5, color="0.93", zorder=0)
            ax.text((start + i - 1) / 2, 1.01, names[start], ha="center", va="bottom",
                    fontsize=7, color="0.3", transform=ax.get_xaxis_transform())  # fmt: skip
            start = i


def panel_a(axes: Sequence[Axes], rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(a) on two axes: per arm, one point per seed of each metric (log y); (what is drawn per
    arm, the reference lines' text)."""
    order = arms(rows)
    groups = dict(zip(rows["label"], rows["group"], strict=False))
    drawn, references = [], []
    for ax, (column, label, factor) in zip(axes, PANEL_METRICS, strict=True):
        for x, arm in enumerate(order):
            mine = rows[rows["label"] == arm].sort_values("seed")
            offsets = np.linspace(-JITTER / 2, JITTER / 2, len(mine)) if len(mine) > 1 else [0.0]
            for dx, (_, row) in zip(offsets, mine.iterrows(), strict=True):
                _draw_value(ax, x + dx, float(row[column]), _style(row))
        line = _reference_lines(ax, rows, column, factor)
        references.append(f"{label}: Baseline median {line}" if line else "")
        ax.set_yscale("log")
        ax.set_xticks(range(len(order)), order, rotation=35, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(order) - 0.4)
        ax.set_ylabel(label, fontsize=9)
        log_ticks(ax)
        _group_bands(ax, order, groups)
    for arm in order:
        mine = rows[rows["label"] == arm]
        drawn.append(f"{arm} ({_seeds(mine)}): " + "; ".join(
            f"{label.split(' (')[0]} {_range(mine[column])}" for column, label, _ in PANEL_METRICS
        ))  # fmt: skip
    return drawn, [r for r in references if r]


def _seeds(rows: pd.DataFrame) -> str:
    """'3 models, seeds 0, 1, 2' (and how many diverged: measured at the weights they kept)."""
    n = len(rows)
    seeds = ", ".join(str(int(s)) for s in sorted(rows["seed"].dropna()))
    text = f"{n} model{'s' * (n != 1)}" + (f", seed{'s' * (n != 1)} {seeds}" if seeds else "")
    diverged = int(rows["diverged"].fillna(False).astype(bool).sum())
    return text + (f", {diverged} diverged: the weights it kept" if diverged else "")


def _range(values: pd.Series) -> str:
    text = [f"{v:.3g}" if math.isfinite(v) else "inf" for v in sorted(values.astype(float))]
    return text[0] if text[0] == text[-1] else f"{text[0]}-{text[-1]}"


def panel_b(axes: Sequence[Axes], rows: pd.DataFrame) -> list[str]:
    """(b) on two axes: each metric against tokens per parameter (log x, log y), per arm the seeds
    as points and their median per training length as a line; what is drawn per arm."""
    drawn = []
    rows = rows[rows["tokens_per_param"] > 0]  # (a run that diverged at once kept its init)
    order = arms(rows)
    for ax, (column, label, _) in zip(axes, PANEL_METRICS, strict=True):
        for arm in order:
            mine = rows[rows["label"] == arm].sort_values("tokens_per_param")
            style = _style(mine.iloc[0])
            for _, row in mine.iterrows():
                _draw_value(ax, float(row["tokens_per_param"]), float(row[column]), style)
            medians = mine.groupby("tokens_per_param")[column].median()
            finite = medians[np.isfinite(medians)]
            dashes = "--" if mine.iloc[0]["kind"] == "folded" else "-"
            ax.plot(finite.index, finite.values, color=style["color"], ls=dashes, lw=1.5, alpha=0.8)
        ax.set(xscale="log", yscale="log", xlabel="training tokens per parameter (log scale)")
        ax.set_ylabel(label, fontsize=9)
        log_ticks(ax, "x")
        log_ticks(ax, "y")
    for arm in order:
        medians = rows[rows["label"] == arm].groupby("tokens_per_param")
        parts = []
        for column, label, _ in PANEL_METRICS:
            points = medians[column].median()
            parts.append(f"{label.split(' (')[0]} " + ", ".join(
                f"{_range(pd.Series([v]))} at {t:.3g}" for t, v in points.items()
            ))  # fmt: skip
        drawn.append(
            f"{arm}, median over the seeds at each tokens per parameter: " + "; ".join(parts)
        )
    return drawn


def _legend(rows: pd.DataFrame) -> list[Line2D]:
    """A marker per arm, then the reference lines."""
    handles = []
    for arm in arms(rows):
        style = _style(rows[rows["label"] == arm].iloc[0])
        handles.append(Line2D([], [], ls="none", ms=7, mew=1.4, mec=style["color"], label=arm,
                              **style))  # fmt: skip
    if ((rows["variant"] == "baseline") & (rows["kind"] == "run")).any():
        handles.append(Line2D([], [], color="0.35", ls=":", lw=1.2, label="(a) Baseline median"))
        handles.append(
            Line2D([], [], color="#BB5566", ls="--", lw=1.2, label="(a) the probe's limit")
        )
    return handles


def _key(rows: pd.DataFrame) -> str:
    parts = []
    for arm in arms(rows):
        style = _style(rows[rows["label"] == arm].iloc[0])
        fill = "filled" if style["mfc"] != "white" else "hollow"
        color = COLOR_NAMES.get(style["color"], "grey")
        parts.append(f"{arm}: {color} {fill} {MARKER_NAMES.get(style['marker'], 'circles')}")
    return "; ".join(parts)


def fig_tails(tails_json: str | Path) -> tuple[Figure, str]:
    """The figure (module docstring) of a `tapernorm tails` JSON record, and its caption."""
    rows = measured(read_rows(tails_json))
    if rows.empty:
        raise ValueError(f"{tails_json}: no measured model to draw")
    # (b) where an arm has models of several training lengths
    lengths = bool(rows.groupby("label")["tokens_per_param"].nunique().max() > 1)
    fig, subfigs, axes = new_rows(2 if lengths else 1, 2, (13, 10.5 if lengths else 5.6))
    first = side_by_side(rows)
    drawn, references = panel_a(axes[0], first)
    steps = ", ".join(f"{int(s):,}" for s in sorted(first["steps"].dropna().unique()))
    subfigs[0].suptitle(
        f"(a) side by side: d={_optional_int(first['width'].max())}"
        + (f", {steps} steps" if steps else "") + "; each point one model (its seed)",
        fontsize=10,
    )  # fmt: skip
    trend = []
    if lengths:
        trend = panel_b(axes[1], rows)
        subfigs[1].suptitle(
            "(b) against training length: the seeds as points, their median as a line", fontsize=10
        )
    handles = _legend(rows)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    return fig, _caption(rows, drawn, references, trend)


def _optional_int(value) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{int(value)}"


def _caption(rows, drawn, references, trend) -> str:
    infinite = int((~np.isfinite(rows[[c for c, _, _ in PANEL_METRICS]].astype(float))).sum().sum())
    head = (
        "**Tails battery, side by side** (not in the paper; `tapernorm tails`, the battery of "
        "`tapernorm probe`). (a) Each point one model at g = 0 (a folded model, DyT and the "
        "baselines as they are): left, its worst window loss on validation windows with 5% of "
        "their tokens replaced at random (scored against the clean next tokens); right, the "
        "largest RMS of the final norm's input that a bounded search finds, over the clean "
        "windows' median (both log scale, float32). Arms grouped (shaded bands): the baseline, "
        "the tapered arms, DyT and its untied-head baseline, the folded models. Dotted: the "
        "baselines' median; dashed: `tapernorm probe`'s limit against such a reference (2x the "
        "worst noisy loss, 10x the search ratio)."
    )
    if trend:
        head += (
            " (b) The same against training tokens per parameter (log scale): each seed a point, "
            "the line the median over the seeds of each length (dashed: a folded arm's)."
        )
    if infinite:
        head += f" An x at the top of an axes is a number that is not finite ({infinite})."
    return caption_text(
        head,
        ("Drawn in (a)", "; ".join(drawn) + "."),
        ("Reference lines", "; ".join(references) + "." if references else ""),
        ("Drawn in (b)", "; ".join(trend) + "." if trend else ""),
        ("Key", _key(rows) + "."),
    )
