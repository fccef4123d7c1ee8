"""Figures 1-4, the scale-anchor ablation (fig6) and its gradient norms (fig4b) from run directories;
each saved as .pdf (TrueType fonts), .png and .html (the PNG with its caption as text).

Figures are built on matplotlib Figure objects (no pyplot, no global backend state) and returned with
their caption (markdown: what is drawn, this run's numbers, the paper's), so callers and tests can
inspect both. Each variant has one colour from a colour-blind-safe palette (COLORS), its own marker,
and a line style that says what happens to the final norm, so no two variants differ in colour
alone. The paper's six variants and the runs beyond the paper (DyT and the untied-head runs it is
matched against) are drawn on separate axes: their scales can differ by orders of magnitude. Curves
are the mean over the non-diverged seeds of a variant, with a band over the seeds where there are
several (seed_band); a diverged run is drawn as a thin line of its own that ends in an 'x' at its
divergence step, and the legend says how many diverged. The paper's values appear only in the
caption. save_figure writes every figure and stamps it with the code's commit and the config's hash.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from .. import provenance
from ..atomic import atomic_write_bytes
from ..config import PAPER_VARIANTS, VARIANTS
from ..pipeline import FIG2_VARIANTS
from ..schedules import gate_at
from . import paper
from .html import figure_page
from .runs import (
    CLIPPED_COLUMNS,
    END_FRACTION,
    GRAD_COLUMNS,
    diverged_text,
    final_tapered,
    load_runs,
    pick_width,
    variant_order,
)
from .stats import gradient_ratios

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
GRAD_TITLES = {
    "grad_attn_qkv": "attention QKV",
    "grad_attn_out": "attention $W_o$",
    "grad_mlp_in": "MLP $W_1$",
    "grad_mlp_out": "MLP $W_2$",
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


def seed_band(wide: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """The band over the seeds (one column each) of a curve: none for one seed, the min-max for
    fewer than PERCENTILE_SEEDS, the 2.5-97.5 percentile from there on."""
    n = wide.shape[1]
    if n < 2:
        return None
    if n < PERCENTILE_SEEDS:
        return wide.min(axis=1), wide.max(axis=1)
    return wide.quantile(PERCENTILE_BAND[0], axis=1), wide.quantile(PERCENTILE_BAND[1], axis=1)


def band_name(n: int) -> str:
    """What seed_band draws for n seeds, for captions."""
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
    fig: Figure, out: str | Path, caption: str = "", stamp: str | None = None
) -> list[Path]:
    """Write <out stem>.pdf (TrueType fonts), <out stem>.png (dpi 150) and <out stem>.html (the PNG
    inline, the caption below it as text), each rendered in memory, then written atomically.

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
    paths = []
    for fmt, data in images.items():
        path = out.with_suffix(f".{fmt}")
        atomic_write_bytes(path, data)
        paths.append(path)
    return paths


def _new_figure(nrows: int, ncols: int, size: tuple[float, float], **kw) -> tuple[Figure, list]:
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, list(axes.flat)


def _new_rows(
    nrows: int, ncols: int, size: tuple[float, float]
) -> tuple[Figure, list[SubFigure], list[list[Axes]]]:
    """A figure of `nrows` sub-figures (each with its own title and legend) of `ncols` axes."""
    with sns.axes_style("whitegrid"):
        fig = Figure(figsize=size, layout="constrained")
        rows = list(fig.subfigures(nrows, 1, squeeze=False).flat)
        axes = [list(row.subplots(1, ncols, squeeze=False, sharex=True).flat) for row in rows]
    return fig, rows, axes


def _scale(runs: pd.DataFrame) -> str:
    """'d=64, 6 steps, 2 seeds' for the titles (seeds: runs per variant, min-max)."""
    steps = "/".join(f"{s:,}" for s in sorted(runs["steps"].unique()))
    per_variant = runs.groupby("variant").size()
    lo, hi = int(per_variant.min()), int(per_variant.max())
    seeds = f"{lo}" if lo == hi else f"{lo}-{hi}"
    widths = "/".join(str(w) for w in sorted(runs["width"].unique()))
    return f"d={widths}, {steps} steps, {seeds} seed{'s' if hi > 1 else ''}"


def _at_width(run_dirs, width: int | None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    runs, metrics = load_runs(run_dirs)
    runs = runs[runs["variant"].notna()]
    if runs.empty:
        raise ValueError("these figures need runs with a Table 1 variant")
    width = pick_width(runs, width)
    runs = runs[runs["width"] == width]
    return runs, metrics[metrics["run"].isin(runs["run"])], width


def plot_variant(ax: Axes, runs: pd.DataFrame, metrics: pd.DataFrame, variant: str, column: str):
    """Mean over the variant's non-diverged runs with its seed_band; diverged runs as thin lines
    ending in an 'x' at the divergence step."""
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
        wide = rows[rows["run"].isin(ok["run"])].pivot(index="step", columns="run", values=column)
        style = line_style(variant, len(wide))
        ax.plot(wide.index, wide.mean(axis=1), label=label, lw=1.5, **style)
        band = seed_band(wide)
        if band is not None:
            ax.fill_between(wide.index, *band, color=COLORS[variant], alpha=BAND_ALPHA, lw=0)
        label = None
    for run in bad.itertuples():
        d = rows[rows["run"] == run.run].sort_values("step")
        ax.plot(d["step"], d[column], lw=0.8, alpha=0.8, label=label, **line_style(variant, len(d)))
        label = None
        if len(d):
            ax.plot(
                [run.diverged_step], [d[column].iloc[-1]], "x", color=COLORS[variant], ms=9, mew=2
            )


def _plot_variants(
    ax: Axes, runs, metrics, column: str, variants: Sequence[str] | None = None, log: bool = False
) -> None:
    """One curve per variant (`variants`, default all present) of `column` vs step."""
    for variant in variant_order(runs["variant"] if variants is None else variants):
        plot_variant(ax, runs, metrics, variant, column)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")


def _legend_below(ax: Axes) -> None:
    """The axes' legend under it, so that it hides no curve."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)


def _end_values(runs: pd.DataFrame, column: str, variants: Sequence[str]) -> str:
    """'Baseline 39.3, Final-Taper 59.3' (mean over the non-diverged seeds of the end values)."""
    ok = runs[~runs["diverged"]]
    means = ok.groupby("variant")[f"{column}_end"].mean()
    return ", ".join(
        f"{VARIANTS[v]['label']} {means[v]:.3g}"
        for v in variants
        if v in means and math.isfinite(means[v])
    )


# ---- figure 1: the layer and the gate schedule ------------------------------------------------------


def _box(ax: Axes, xy: tuple[float, float], text: str, color: tuple, w=0.24, h=0.2) -> None:
    x, y = xy
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=color, ec="0.2", lw=1.2
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=12)


def _node(ax: Axes, xy: tuple[float, float], text: str, r: float = 0.055, size: int = 10) -> None:
    ax.add_patch(Circle(xy, r, fc="white", ec="0.2", lw=1.2))
    ax.text(*xy, text, ha="center", va="center", fontsize=size)


def _arrow(ax: Axes, a: tuple[float, float], b: tuple[float, float]) -> None:
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, lw=1.2, color="0.2"))


def draw_tapernorm(ax: Axes) -> None:
    """The TaperNorm layer: norm branch weighted g plus linear branch weighted 1-g, summed."""
    ax.set(xlim=(0, 1.25), ylim=(-0.05, 1), aspect="equal")
    ax.axis("off")
    norm_c, lin_c = COLORS["baseline"], COLORS["internal_aux"]
    ax.text(0.04, 0.5, "$h$", ha="center", va="center", fontsize=15)
    _box(ax, (0.34, 0.78), r"$\dfrac{h}{r(h)} \odot \gamma$", to_rgba(norm_c, 0.3))
    _box(ax, (0.34, 0.22), r"$c\, h \odot \tilde{\gamma}$", to_rgba(lin_c, 0.3))
    _node(ax, (0.64, 0.78), "$\\times g$")
    _node(ax, (0.64, 0.22), "$\\times(1{-}g)$", r=0.075, size=9)
    _node(ax, (0.82, 0.5), "$+$", r=0.045)
    _arrow(ax, (0.07, 0.52), (0.22, 0.76))
    _arrow(ax, (0.07, 0.48), (0.22, 0.24))
    _arrow(ax, (0.46, 0.78), (0.585, 0.78))
    _arrow(ax, (0.46, 0.22), (0.565, 0.22))
    _arrow(ax, (0.68, 0.74), (0.79, 0.54))
    _arrow(ax, (0.69, 0.27), (0.79, 0.46))
    _arrow(ax, (0.865, 0.5), (0.98, 0.5))
    ax.text(0.34, 0.93, "normalization branch", ha="center", fontsize=9)
    ax.text(
        0.34, 0.09, "linear branch\n(c frozen at taper start)", ha="center", va="top", fontsize=9
    )
    ax.text(0.99, 0.5, "TaperNorm\n$(h; g)$", ha="left", va="center", fontsize=10)
    ax.set_title("(a) TaperNorm: g = 1 is RMSNorm, g = 0 a fixed linear map", fontsize=10)


def fig1(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """(a) the layer; (b) the gate g(k) read from a tapered run's metrics, taper start/end marked."""
    runs, metrics, width = _at_width(run_dirs, width)
    tapered = runs[runs["final_taper"] | runs["internal_taper"]]
    tapered = tapered.sort_values(["diverged", "seed", "variant"])  # a finished run first
    if tapered.empty:
        raise ValueError(f"fig1 needs a run with tapered norms at width {width}")
    run = tapered.iloc[0]
    gate = metrics[metrics["run"] == run["run"]].sort_values("step")
    gate = gate[gate["gate"].notna()] if "gate" in gate else gate.assign(gate=[])
    fig, (ax_a, ax_b) = _new_figure(1, 2, (11, 4))
    draw_tapernorm(ax_a)
    color = COLORS[run["variant"]]
    ax_b.plot(gate["step"], gate["gate"], color=color, marker=".", ms=3)
    diverged = ""
    if run["diverged"]:  # the logged gate ends there; the rest of the schedule its config sets
        steps = range(int(gate["step"].max()) if len(gate) else 0, int(run["steps"]) + 1)
        scheduled = [gate_at(k, int(run["taper_start"]), int(run["taper_end"])) for k in steps]
        ax_b.plot(steps, scheduled, color=color, ls="--", lw=1, label="scheduled, not run")
        at = int(run["diverged_step"])
        ax_b.plot(
            [at],
            [gate_at(at, int(run["taper_start"]), int(run["taper_end"]))],
            "x",
            ms=9,
            mew=2,
            color=color,
            label=f"diverged at step {at}",
        )
        ax_b.legend(fontsize=8, loc="lower left")
        diverged = (
            f" Run {run['name']} diverged at step {at} (weights rolled back to step "
            f"{int(run['weights_step'])}): its logged gate ends there (×), and the dashed line is "
            "the rest of the schedule its config sets."
        )
    # each label on the inner side of its line (start: right of it, end: left), so neither runs
    # past the axes
    for step, name, side in (
        (run["taper_start"], "taper start", 1),
        (run["taper_end"], "taper end", -1),
    ):
        ax_b.axvline(step, color="0.4", ls=":", lw=1)
        ax_b.annotate(
            f"{name}\n(step {step:,})",
            (step, 1.06),
            xytext=(3 * side, 0),
            textcoords="offset points",
            ha="left" if side > 0 else "right",
            va="bottom",
            fontsize=8,
        )
    ax_b.set(xlabel="step k", ylabel="gate g(k)", ylim=(-0.05, 1.25))
    ax_b.set_title(
        f"(b) gate schedule logged by run {run['name']} ({run['steps']:,} steps)", fontsize=10
    )
    caption = caption_text(
        "**Figure 1.** (a) The TaperNorm layer: a normalizing branch h/r(h)·γ weighted g plus a "
        "sample-independent linear branch c·h·γ̃ weighted 1-g (c frozen at the taper start), "
        "summed; g = 1 is RMSNorm, g = 0 a fixed linear map. (b) The gate g(k) as logged by run "
        f"{run['name']} ({VARIANTS[run['variant']]['label']}, {run['steps']:,} steps): 1 until "
        f"the taper starts at step {run['taper_start']:,}, 0 from step {run['taper_end']:,} on "
        "(dotted lines)." + diverged,
    )
    return fig, caption


# ---- figures 2-4 --------------------------------------------------------------------------------


def fig2(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Training loss vs step: Baseline vs Internal-Taper (+aux) (and DyT with its untied-head
    baseline, if given) at one width; one axes (the losses share a scale)."""
    runs, metrics, width = _at_width(run_dirs, width)
    runs = runs[runs["variant"].isin(FIG2_VARIANTS)]
    missing = {"baseline", "internal_aux"} - set(runs["variant"])
    if missing:
        raise ValueError(
            f"fig2 needs baseline and internal_aux runs at d={width}; missing {missing}"
        )
    fig, (ax,) = _new_figure(1, 1, (6.5, 4.6))
    _plot_variants(ax, runs, metrics, "loss")
    ax.set_ylabel("training loss (CE)")
    ax.set_title(f"Training loss ({_scale(runs)})", fontsize=10)
    ax.legend(fontsize=8)
    variants = variant_order(runs["variant"])
    ref = paper.FIG2_FINAL_LOSS
    caption = caption_text(
        f"**Figure 2.** Training loss (cross-entropy) vs step at {_scale(runs)}: Baseline and "
        "Internal-Taper (+aux)"
        + (
            ", and DyT with the untied-head runs it is matched against"
            if set(variants) - {"baseline", "internal_aux"}
            else ""
        )
        + ".",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here", _end_values(runs, "loss", variants) + "."),
        (
            "Paper",
            f"{paper.FIG2_SOURCE}: final training loss ≈{ref['internal_aux']:.2f} "
            f"(Internal-Taper (+aux)) vs ≈{ref['baseline']:.2f} (Baseline), at the paper's "
            "scale and corpus, not this run's.",
        ),
    )
    return fig, caption


def fig3(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Mean logit L2 norm vs step (log y) at one width: (a) the paper's variants, (b) DyT and the
    untied-head runs, each on axes fitted to its own curves."""
    runs, metrics, width = _at_width(run_dirs, width)
    groups = variant_groups(runs["variant"])
    fig, axes = _new_figure(1, len(groups), (6.2 * len(groups), 5.0))
    for i, (ax, (title, variants)) in enumerate(zip(axes, groups, strict=True)):
        _plot_variants(ax, runs, metrics, "logit_norm", variants, log=True)
        ax.set_ylabel("mean logit norm $\\|z_t\\|_2$")
        ax.set_title(f"({'ab'[i]}) {title}", fontsize=10)
        _legend_below(ax)
    fig.suptitle(f"Logit norm ({_scale(runs)})", fontsize=11)
    variants = variant_order(runs["variant"])
    lo, hi = paper.FIG3_ANCHORED_RANGE
    split = paper.FIG3_SPLIT_PROGRESS
    caption = caption_text(
        f"**Figure 3.** Mean logit L2 norm vs step (log scale) at {_scale(runs)}: (a) the paper's "
        "variants"
        + (
            "; (b) DyT and the untied-head runs it is matched against, on axes of their own"
            if len(groups) > 1
            else ""
        )
        + ". Removing the final norm lets the logit scale grow (logit chasing).",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here", _end_values(runs, "logit_norm", variants) + "."),
        (
            "Paper",
            f"{paper.FIG3_SOURCE}: at the end of training All-Taper ≈"
            f"{paper.FIG3_END_LOGIT_NORM['all']:.0e}, Final-Taper ≈"
            f"{paper.FIG3_END_LOGIT_NORM['final']:.1e}, the anchored runs ≈{lo:.0e}-{hi:.0e}; the "
            f"curves split at ~{split[0]:.0%}-{split[1]:.0%} of training. Those are magnitudes "
            "after the paper's full run; compare the ratios between variants, not the values "
            "(claim 3 in the claims report does).",
        ),
    )
    return fig, caption


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
        _plot_variants(ax, runs, metrics, column, variants, log=True)
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
    runs, metrics, width = _at_width(run_dirs, width)
    groups = variant_groups(runs["variant"])
    fig, rows, axes = _new_rows(len(groups), len(GRAD_COLUMNS), (17, 3.9 * len(groups) + 0.6))
    for i, (row, row_axes, (title, variants)) in enumerate(zip(rows, axes, groups, strict=True)):
        _grad_row(row, row_axes, runs, metrics, GRAD_COLUMNS, variants, f"({'ab'[i]}) {title}")
    _figure_legend(fig, [row_axes[0] for row_axes in axes])
    fig.suptitle(f"Gradient norms before clipping ({_scale(runs)})", fontsize=11)
    variants = variant_order(runs["variant"])
    direction = direction_text(runs, GRAD_COLUMNS)
    caption = caption_text(
        "**Figure 4.** Gradient Frobenius norms before clipping, averaged over blocks, vs step (log "
        f"scale) at {_scale(runs)}, one panel per weight type: (a) the paper's variants"
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
        starts.append(steps.iloc[-max(1, math.ceil(END_FRACTION * len(steps)))])
    return float(min(starts))


def fig4b(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Gradient norms of the scale-anchor ablation (where claim 5 is judged) per weight type, before
    clipping and (where logged) after clipping, the paper's six variants; the end window that claim 5
    averages is shaded."""
    runs, metrics, width = _at_width(run_dirs, width)
    runs = runs[runs["variant"].isin(PAPER_VARIANTS)]
    if runs.empty:
        raise ValueError(f"fig4b needs runs of the paper's variants {PAPER_VARIANTS} at d={width}")
    metrics = metrics[metrics["run"].isin(runs["run"])]
    conventions = [("before clipping", GRAD_COLUMNS)]
    if all(c in metrics and metrics[c].notna().any() for c in CLIPPED_COLUMNS):
        conventions.append(("after clipping", CLIPPED_COLUMNS))
    variants = variant_order(runs["variant"])
    fig, rows, axes = _new_rows(
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
    tokens = runs["train_tokens"].dropna().unique()
    data = f", first {int(tokens[0]):,} train tokens" if len(tokens) == 1 else ""
    fig.suptitle(f"Scale-anchor ablation: gradient norms ({_scale(runs)}{data})", fontsize=11)
    caption = caption_text(
        "**Figure 4b** (not in the paper). Gradient Frobenius norms of the scale-anchor ablation's "
        f"runs ({_scale(runs)}{data}), where claim 5 is judged, averaged over blocks, vs step (log "
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


# ---- figure 6: the scale-anchor ablation ----------------------------------------------------------


def fig6(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """The ablation's pre-logit geometry vs step: logit norm, r(h) and c_f r(h) (log y); fraction of
    tokens with a positive margin, cos(grad_h CE, h), and softmax saturation."""
    runs, metrics, width = _at_width(run_dirs, width)
    logged = runs["last_step"] > 0  # (a run that diverged at step 1 logged nothing)
    lacking = runs.loc[logged & ~runs["geometry"], "name"].tolist()
    if lacking:
        raise ValueError(
            f"fig6 needs runs trained with log.geometry=true; these lack margin_pos_frac and "
            f"grad_h_cos: {lacking}"
        )
    panels = [
        ("logit_norm", "mean logit norm $\\|z_t\\|_2$", "logit norm"),
        ("prelogit_scale", "mean pre-logit scale $r(h)$", "pre-logit scale (what Eq. 5 holds)"),
        ("final_c_r", "$c_f \\cdot r(h)$", "final taper's scale over a norm's (1 = norm)"),
        ("margin_pos_frac", "fraction of tokens with margin > 0", "positive margins"),
        (
            "grad_h_cos",
            "mean cos($\\nabla_h$CE, $h$)",
            "Props. 4.1/4.2: ~0 with a final norm, < 0 without",
        ),
        ("saturation", "mean $\\|$softmax$(z) - e_y\\|_2$", "softmax saturation (dCE/dz)"),
    ]
    panels_all = panels
    panels = [p for p in panels if p[0] in metrics and metrics[p[0]].notna().any()]
    panels = panels or panels_all[:1]  # nothing logged: one empty panel (the caption says why)
    ncols = 3 if len(panels) > 4 else len(panels)
    nrows = -(-len(panels) // ncols)
    fig, axes = _new_figure(nrows, ncols, (4.7 * ncols, 4.0 * nrows + 0.4), sharex=True)
    for ax, (column, ylabel, title) in zip(axes, panels, strict=False):
        log = column in ("logit_norm", "prelogit_scale", "final_c_r")
        _plot_variants(ax, runs, metrics, column, log=log)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if column == "grad_h_cos":
            ax.axhline(0.0, color="0.3", ls=":", lw=1, zorder=0)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[: ncols * (nrows - 1)]:
        ax.set_xlabel("")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    tokens = runs["train_tokens"].dropna().unique()
    data = f", first {int(tokens[0]):,} train tokens" if len(tokens) == 1 else ""
    fig.suptitle(f"Scale-anchor ablation ({_scale(runs)}{data})", fontsize=11)
    variants = variant_order(runs["variant"])
    caption = caption_text(
        "**Figure 6** (not in the paper). The scale-anchor ablation, a small slice of the corpus "
        f"trained for many epochs ({_scale(runs)}{data}), vs step: the mean logit norm, the mean "
        "pre-logit scale r(h) (what Eq. 5's scale loss holds at its target) and the final taper's "
        "scale c_f·r(h) over a norm's (1 = what an RMSNorm gives; only variants whose final norm "
        "tapers), on log scales; the fraction of tokens with a positive margin; the mean cosine "
        "between the loss gradient at the pre-logit state and that state (about 0 with a final "
        "norm, Prop. 4.1; negative without one once margins are positive, Prop. 4.2; dotted: 0); "
        "softmax saturation, the mean ||softmax(z) - e_y||, the size of the loss gradient with "
        "respect to the logits.",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here (logit norm)", _end_values(runs, "logit_norm", variants) + "."),
    )
    return fig, caption


FIGURES: dict[str, Callable[..., tuple[Figure, str]]] = {
    "fig1": fig1,
    "fig2": fig2,
    "fig3": fig3,
    "fig4": fig4,
    "fig4b": fig4b,
    "fig6": fig6,
}


def make_figure(
    which: str,
    run_dirs: Sequence[str | Path],
    out: str | Path,
    width: int | None = None,
    stamp: str | None = None,
) -> list[Path]:
    """Build figure `which` from the runs and save it as <out stem>.pdf, .png and .html, stamped
    with `stamp` (default: provenance.stamp())."""
    if which not in FIGURES:
        raise ValueError(f"unknown figure {which!r}; choose from {sorted(FIGURES)}")
    fig, caption = FIGURES[which](run_dirs, width)
    return save_figure(fig, out, caption, stamp)
