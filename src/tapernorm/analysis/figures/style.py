"""How every figure looks and is saved: one colour (colour-blind-safe), marker and line style per
variant, the seed bands and what the captions say of them, the caption's markdown, the provenance
stamp, and save_figure (.pdf with TrueType fonts, .png, .html). Figures are matplotlib Figure
objects (no pyplot, no global backend state) made by new_figure / new_rows."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from ...runtime import provenance
from ...runtime.output_set import OutputSet, marker_path
from ...variants import PAPER_VARIANTS, VARIANTS
from ..html import figure_page
from ..runs import diverged_text, final_tapered, variant_order

# Colour-blind-safe colours (Okabe and Ito's orange, sky blue and black; Paul Tol's rose, indigo,
# teal and green; ColorBrewer's brown; Okabe and Ito's blue), chosen so that any two variants drawn
# on the same axes stay at least 35 CIELAB units apart in normal vision and in simulated
# deuteranopia and protanopia (tests/test_figures.py checks a margin of 20); none is pale on white.
COLORS = {
    "baseline": "#000000",
    "internal": "#56B4E9",
    "internal_aux": "#E69F00",
    "final": "#CC6677",
    "all": "#8C510A",
    "all_aux": "#332288",
    "baseline_untied": "#0072B2",
    "internal_aux_untied": "#44AA99",
    "dyt": "#117733",
}


COLOR_NAMES = {
    "#000000": "black",
    "#56B4E9": "sky blue",
    "#E69F00": "orange",
    "#CC6677": "rose",
    "#8C510A": "brown",
    "#332288": "indigo",
    "#0072B2": "blue",
    "#44AA99": "teal",
    "#117733": "green",
}


MARKERS = {  # one per variant, drawn hollow
    "baseline": "o",
    "internal": "s",
    "internal_aux": "D",
    "final": "v",
    "all": "^",
    "all_aux": "P",
    "baseline_untied": "<",
    "internal_aux_untied": ">",
    "dyt": "*",
}


MARKER_NAMES = {
    "o": "circles",
    "s": "squares",
    "D": "diamonds",
    "v": "down triangles",
    "^": "up triangles",
    "P": "plus signs",
    "<": "left triangles",
    ">": "right triangles",
    "*": "stars",
}


LINE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


LINE_MEANINGS = {
    "-": "final norm kept",
    "--": "final norm tapered",
    ":": "untied head",
    "-.": "DyT",
}


PERCENTILE_BAND = (0.025, 0.975)  # the band from PERCENTILE_SEEDS seeds on


PERCENTILE_SEEDS = 10  # below this (and from 2 seeds) the band is the seeds' min-max


BAND_ALPHA = 0.2


PAPER_GROUP = "the paper's variants"


BEYOND_GROUP = "beyond the paper: DyT and the untied-head runs it is matched against"


_MARKS_PER_LINE = 8


PDF_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42}  # TrueType (Type 42), not Type 3


STAMP_FONTSIZE = 8


def linestyle(variant: str) -> str:
    """The final norm: dashed where it is tapered, dotted for the untied-head runs, dash-dot for
    DyT, solid for an RMSNorm final norm."""
    if final_tapered(variant):
        return "--"
    if variant.endswith("_untied"):
        return ":"
    return "-." if VARIANTS[variant].get("norm") == "dyt" else "-"


def marker(variant: str) -> str:
    """The variant's own marker (MARKERS)."""
    return MARKERS[variant]


def line_style(variant: str, n_points: int) -> dict:
    """Colour, line style and marker of a variant; markers every n_points/8 points, each variant's
    offset so that overlapping curves do not hide each other's markers."""
    every = max(1, n_points // _MARKS_PER_LINE)
    offset = list(VARIANTS).index(variant) * every // len(VARIANTS)
    return {
        "color": COLORS[variant],
        "linestyle": linestyle(variant),
        "marker": marker(variant),
        "markevery": (offset, every),
        "ms": 5,
        "mfc": "white",
        "mew": 1.2,
    }


def variant_groups(variants) -> list[tuple[str, list[str]]]:
    """(title, variants) per axes: the paper's six, then the runs beyond the paper, each group only if
    present, in Table 1's order."""
    present = variant_order(variants)
    groups = (
        (PAPER_GROUP, [v for v in present if v in PAPER_VARIANTS]),
        (BEYOND_GROUP, [v for v in present if v not in PAPER_VARIANTS]),
    )
    return [(title, group) for title, group in groups if group]


def style_key(variants) -> str:
    """The legend in words: each variant's colour, line style and marker, then what the line styles
    mean."""
    present = variant_order(variants)
    styles = "; ".join(
        f"{VARIANTS[v]['label']}: {COLOR_NAMES[COLORS[v]]}, {LINE_NAMES[linestyle(v)]}, "
        f"{MARKER_NAMES[marker(v)]}"
        for v in present
    )
    used = {linestyle(v) for v in present}
    meanings = ", ".join(f"{LINE_NAMES[k]} = {w}" for k, w in LINE_MEANINGS.items() if k in used)
    return f"{styles}. Line style: {meanings}."


def _min_max(values: pd.Series) -> tuple[float, float]:
    return float(values.min()), float(values.max())


def seed_errorbar(n: int):
    """seaborn's `errorbar` of the band over n seeds of a curve: none for one seed, the min-max
    for fewer than PERCENTILE_SEEDS, the 2.5-97.5 percentile interval from there on."""
    if n < 2:
        return None
    if n < PERCENTILE_SEEDS:
        return _min_max
    return ("pi", 100 * (PERCENTILE_BAND[1] - PERCENTILE_BAND[0]))


def band_name(n: int) -> str:
    """What seed_errorbar draws for n seeds, for captions."""
    if n < 2:
        return "no band"
    if n < PERCENTILE_SEEDS:
        return f"band: min-max over the {n} seeds"
    return f"band: 2.5-97.5 percentile over the {n} seeds"


def bands_text(runs: pd.DataFrame, variants: Sequence[str]) -> str:
    """The caption's sentence on lines and bands: per count of non-diverged seeds, what is drawn
    (naming the variants when the counts differ), and how diverged runs are drawn."""
    ok = runs[~runs["diverged"]].groupby("variant").size()
    present = variant_order(variants)
    by_count: dict[int, list[str]] = {}
    for v in present:
        by_count.setdefault(int(ok.get(v, 0)), []).append(VARIANTS[v]["label"])
    parts = []
    for n, labels in sorted(by_count.items()):
        if n == 0:
            what = "every run diverged: no mean line"
        elif n == 1:
            what = "one seed: the line is that run, no band"
        else:
            what = f"{n} seeds: the line is their mean, {band_name(n)}"
        parts.append(what if len(by_count) == 1 else f"{what} ({', '.join(labels)})")
    text = "; ".join(parts)
    text = text[0].upper() + text[1:] + "."
    if runs["diverged"].any():
        text += (
            " A diverged run is a thin line of its own ending in × at its divergence step, left "
            f"out of the means: {diverged_text(runs[runs['variant'].isin(present)])}."
        )
    return text


def caption_text(head: str, *items: tuple[str, str]) -> str:
    """A figure's caption as markdown: the head paragraph, then one bullet per (name, text) item that
    has text."""
    bullets = [f"- **{name}.** {text}" for name, text in items if text]
    return head + ("\n\n" + "\n".join(bullets) if bullets else "")


def stamp_figure(fig: Figure, stamp: str) -> None:
    """The provenance stamp as one line at the bottom of the figure; a rehearsal's figure also
    carries REHEARSAL across it, so that no copy of it passes for a result."""
    fig.supxlabel(stamp, fontsize=STAMP_FONTSIZE, x=0.005, ha="left", color="0.3")
    if stamp.startswith(provenance.REHEARSAL):
        fig.text(
            0.5, 0.5, "REHEARSAL", fontsize=64, color="red", alpha=0.18, rotation=25,
            ha="center", va="center", weight="bold", zorder=10,
        )  # fmt: skip


def save_figure(
    fig: Figure,
    out: str | Path,
    caption: str = "",
    stamp: str | None = None,
    command: str = "tapernorm figure",
) -> list[Path]:
    """Write <out stem>.pdf (TrueType fonts), <out stem>.png (dpi 150) and <out stem>.html (the PNG
    inline, the caption below it as text), each rendered in memory, then written as one output set
    (runtime.output_set: the marker <out stem>.set.json).

    Each carries the provenance stamp (default: provenance.stamp() of this code, no config hash): a
    line at the bottom of the image, the PDF's and PNG's Subject metadata, the page's last line."""
    out = Path(out)
    stamp = provenance.stamp() if stamp is None else stamp
    stamp_figure(fig, stamp)
    meta = {"Title": out.stem, "Subject": stamp}
    images = {}
    for fmt, extra in (
        ("pdf", {"metadata": meta | {"CreationDate": None}}),
        ("png", {"dpi": 150, "metadata": meta}),
    ):
        buf = io.BytesIO()
        with mpl.rc_context(PDF_FONTS):
            fig.savefig(buf, format=fmt, bbox_inches="tight", **extra)
        images[fmt] = buf.getvalue()
    text = (f"{caption}\n\n" if caption else "") + f"**Provenance.** {stamp}"
    images["html"] = figure_page(images["png"], text, out.stem).encode()
    figure = OutputSet(marker_path(out.with_suffix("")), command)
    for fmt, data in images.items():
        figure.add(out.with_suffix(f".{fmt}"), data)
    return figure.commit()


def new_figure(nrows: int, ncols: int, size: tuple[float, float], **kw) -> tuple[Figure, list]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, list(axes.flat)


def new_rows(
    nrows: int, ncols: int, size: tuple[float, float]
) -> tuple[Figure, list[SubFigure], list[list[Axes]]]:
    """A figure of `nrows` sub-figures (each with its own title and legend) of `ncols` axes."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=size, layout="constrained")
        rows = list(fig.subfigures(nrows, 1, squeeze=False).flat)
        axes = [list(row.subplots(1, ncols, squeeze=False, sharex=True).flat) for row in rows]
    return fig, rows, axes
