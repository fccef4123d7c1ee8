"""Figures 1-4, the scale-anchor ablation (fig6) and its gradient norms (fig4b) from run directories;
each saved as .pdf (TrueType fonts) and .png.

Figures are built on matplotlib Figure objects (no pyplot, no global backend state) and returned, so
callers and tests can inspect them. Across figures each variant has one colour, one line style (what
happens to the final norm) and one marker (what happens to the internal norms), so no two variants
differ in colour alone. The paper's six variants and the runs beyond the paper (DyT and the untied-head
runs it is matched against) are drawn on separate axes: their scales can differ by orders of
magnitude. Curves are the mean over the non-diverged seeds of a variant with a shaded 2.5-97.5
percentile band; a diverged run is drawn as a thin line of its own that ends in an 'x' at its
divergence step, and the legend says how many diverged. The paper's values appear only as a labelled
note under a figure.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from ..atomic import atomic_write_bytes
from ..config import PAPER_VARIANTS, VARIANTS
from ..pipeline import FIG2_VARIANTS
from . import paper
from .runs import (
    CLIPPED_COLUMNS,
    END_FRACTION,
    GRAD_COLUMNS,
    final_tapered,
    load_runs,
    pick_width,
    variant_order,
)
from .stats import gradient_ratios

# tab10 blue, green, orange, purple, red, brown, grey and olive (the untied-head runs), cyan (DyT)
_TAB10 = sns.color_palette("tab10").as_hex()
COLORS = dict(zip(VARIANTS, [_TAB10[i] for i in (0, 2, 1, 4, 3, 5, 7, 8, 9)], strict=True))
GRAD_TITLES = {
    "grad_attn_qkv": "attention QKV",
    "grad_attn_out": "attention $W_o$",
    "grad_mlp_in": "MLP $W_1$",
    "grad_mlp_out": "MLP $W_2$",
}
BAND = (0.025, 0.975)
BAND_ALPHA = 0.3
PAPER_GROUP = "the paper's variants"
BEYOND_GROUP = "beyond the paper: DyT and the untied-head runs it is matched against"
_MARKS_PER_LINE = 8
PDF_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42}  # TrueType (Type 42), not Type 3


def linestyle(variant: str) -> str:
    """The final norm: dashed where it is tapered, dotted for the untied-head runs, dash-dot for
    DyT, solid for an RMSNorm final norm."""
    if final_tapered(variant):
        return "--"
    if variant.endswith("_untied"):
        return ":"
    return "-." if VARIANTS[variant].get("norm") == "dyt" else "-"


def marker(variant: str) -> str:
    """The internal norms: no marker where they stay RMSNorm, a circle where they taper, a square
    where they taper with the scale loss on, a triangle for DyT."""
    spec = VARIANTS[variant]
    if spec.get("norm") == "dyt":
        return "^"
    if spec["taper"] in ("internal", "all"):
        return "s" if spec["anchor"] else "o"
    return "None"


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
        "ms": 4.5,
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


_LINE_WORDS = {
    "-": "final norm kept (solid)",
    "--": "final norm tapered (dashed)",
    ":": "untied head (dotted)",
    "-.": "DyT (dash-dot)",
}
_MARKER_WORDS = {
    "None": "internal norms kept (no marker)",
    "o": "internal norms tapered (○)",
    "s": "tapered with the scale loss (□)",
    "^": "DyT (△)",
}


def style_key(variants) -> str:
    """What the line styles and markers of these variants mean, for the note under a figure."""
    present = variant_order(variants)
    lines = {linestyle(v) for v in present}
    marks = {marker(v) for v in present}
    return (
        "Line: "
        + ", ".join(w for k, w in _LINE_WORDS.items() if k in lines)
        + "; marker: "
        + ", ".join(w for k, w in _MARKER_WORDS.items() if k in marks)
    )


def save_figure(fig: Figure, out: str | Path) -> list[Path]:
    """Write <out stem>.pdf (TrueType fonts) and <out stem>.png (dpi 150), each rendered in memory,
    then written atomically."""
    out = Path(out)
    paths = []
    for fmt, extra in (("pdf", {"metadata": {"CreationDate": None}}), ("png", {"dpi": 150})):
        buf = io.BytesIO()
        with mpl.rc_context(PDF_FONTS):
            fig.savefig(buf, format=fmt, bbox_inches="tight", **extra)
        path = out.with_suffix(f".{fmt}")
        atomic_write_bytes(path, buf.getvalue())
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
    """Mean over the variant's non-diverged runs with a 2.5-97.5 percentile band; diverged runs as
    thin lines ending in an 'x' at the divergence step."""
    mine = runs[runs["variant"] == variant]
    ok, bad = mine[~mine["diverged"]], mine[mine["diverged"]]
    label = VARIANTS[variant]["label"]
    if len(bad):
        label += f" ({len(bad)}/{len(mine)} diverged, ×)"
    rows = metrics[(metrics["variant"] == variant) & metrics[column].notna()]
    if rows.empty:  # e.g. c_f r(h) of a variant whose final norm does not taper
        return
    if len(ok):
        wide = rows[rows["run"].isin(ok["run"])].pivot(index="step", columns="run", values=column)
        style = line_style(variant, len(wide))
        ax.plot(wide.index, wide.mean(axis=1), label=label, lw=1.5, **style)
        lo, hi = wide.quantile(BAND[0], axis=1), wide.quantile(BAND[1], axis=1)
        ax.fill_between(wide.index, lo, hi, color=COLORS[variant], alpha=BAND_ALPHA, lw=0)
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


def _note(fig: Figure, text: str) -> None:
    fig.supxlabel(textwrap.fill(text, 150), fontsize=7, x=0.01, ha="left", color="0.35")


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


def fig1(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """(a) the layer; (b) the gate g(k) read from a tapered run's metrics, taper start/end marked."""
    runs, metrics, width = _at_width(run_dirs, width)
    tapered = runs[runs["final_taper"] | runs["internal_taper"]].sort_values(["seed", "variant"])
    if tapered.empty:
        raise ValueError(f"fig1 needs a run with tapered norms at width {width}")
    run = tapered.iloc[0]
    gate = metrics[metrics["run"] == run["run"]].sort_values("step")
    fig, (ax_a, ax_b) = _new_figure(1, 2, (11, 4))
    draw_tapernorm(ax_a)
    ax_b.plot(gate["step"], gate["gate"], color=COLORS[run["variant"]], marker=".", ms=3)
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
    return fig


# ---- figures 2-4 --------------------------------------------------------------------------------


def fig2(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
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
    ref = paper.FIG2_FINAL_LOSS
    _note(
        fig,
        f"{style_key(runs['variant'])}. Band: 2.5-97.5 percentile over seeds. End of training "
        f"here: {_end_values(runs, 'loss', variant_order(runs['variant']))}. "
        f"Paper reference ({paper.FIG2_SOURCE}): final training loss ≈{ref['internal_aux']:.2f} "
        f"(Internal-Taper (+aux)) vs ≈{ref['baseline']:.2f} (Baseline).",
    )
    return fig


def fig3(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
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
    lo, hi = paper.FIG3_ANCHORED_RANGE
    _note(
        fig,
        f"{style_key(runs['variant'])}. Band: 2.5-97.5 percentile over seeds. End of training "
        f"here: {_end_values(runs, 'logit_norm', variant_order(runs['variant']))}. "
        f"Paper reference ({paper.FIG3_SOURCE}): end of training All-Taper ≈"
        f"{paper.FIG3_END_LOGIT_NORM['all']:.0e}, Final-Taper ≈"
        f"{paper.FIG3_END_LOGIT_NORM['final']:.1e}, anchored runs ≈{lo:.0e}-{hi:.0e}; "
        f"split at ~{paper.FIG3_SPLIT_PROGRESS[0]:.0%}-{paper.FIG3_SPLIT_PROGRESS[1]:.0%} of training.",
    )
    return fig


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


def fig4(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """Gradient norms before clipping of the four weight types (averaged over blocks) vs step, log y:
    one row for the paper's variants, one for DyT and the untied-head runs."""
    runs, metrics, width = _at_width(run_dirs, width)
    groups = variant_groups(runs["variant"])
    fig, rows, axes = _new_rows(len(groups), len(GRAD_COLUMNS), (17, 3.9 * len(groups) + 0.6))
    for i, (row, row_axes, (title, variants)) in enumerate(zip(rows, axes, groups, strict=True)):
        _grad_row(row, row_axes, runs, metrics, GRAD_COLUMNS, variants, f"({'ab'[i]}) {title}")
    _figure_legend(fig, [row_axes[0] for row_axes in axes])
    fig.suptitle(f"Gradient norms before clipping ({_scale(runs)})", fontsize=11)
    lo, hi = paper.FIG4_NO_FINAL_NORM_GRAD
    _note(
        fig,
        f"{style_key(runs['variant'])}. Band: 2.5-97.5 percentile over seeds. Paper reference "
        f"({paper.FIG4_SOURCE}): without an anchor, no-final-norm gradient norms decay toward "
        f"~{lo}-{hi}; with the scale loss All-Taper matches Internal-Taper.",
    )
    return fig


def _end_window_start(metrics: pd.DataFrame) -> float:
    """The first step of the earliest run's 'end' window (its last 10% of logged steps)."""
    starts = []
    for _, steps in metrics.groupby("run")["step"]:
        steps = steps.sort_values()
        starts.append(steps.iloc[-max(1, math.ceil(END_FRACTION * len(steps)))])
    return float(min(starts))


def _claim5_ratios(runs: pd.DataFrame, columns: Sequence[str]) -> str:
    """The ratios claim 5 compares, over the weight types, of the non-diverged runs' end means:
    no-final-norm over final-norm runs ((Final + All) / (Baseline + Internal)) and All-Taper (+aux)
    over Internal-Taper (+aux); '' unless all six paper variants have them."""
    ok = runs[~runs["diverged"]]
    if set(PAPER_VARIANTS) - set(ok["variant"]):
        return ""
    g = ok.groupby("variant")[[f"{c}_end" for c in columns]].mean()
    if g.isna().any().any():
        return ""
    split, close = gradient_ratios(g.T)  # per weight type
    return (
        f"no-final/final-norm {split.min():.2f}-{split.max():.2f}x, "
        f"All-Taper (+aux)/Internal-Taper (+aux) {close.min():.2f}-{close.max():.2f}x"
    )


def fig4b(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
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
    end = _end_window_start(metrics)
    notes = []
    for i, (row, row_axes, (name, columns)) in enumerate(zip(rows, axes, conventions, strict=True)):
        _grad_row(row, row_axes, runs, metrics, columns, variants, f"({'ab'[i]}) {name}")
        for ax in row_axes:
            ax.axvspan(end, metrics["step"].max(), color="0.88", zorder=0, lw=0)
        ratios = _claim5_ratios(runs, columns)
        if ratios:
            notes.append(f"{name}: {ratios}")
    _figure_legend(fig, [axes[0][0]])
    tokens = runs["train_tokens"].dropna().unique()
    data = f", first {int(tokens[0]):,} train tokens" if len(tokens) == 1 else ""
    fig.suptitle(f"Scale-anchor ablation: gradient norms ({_scale(runs)}{data})", fontsize=11)
    _note(
        fig,
        f"{style_key(runs['variant'])}. Averaged over blocks; band: 2.5-97.5 percentile over "
        f"seeds; grey: the end window (last {END_FRACTION:.0%} of logged steps) whose means claim 5 compares"
        + (f" ({'; '.join(notes)})" if notes else "")
        + ".",
    )
    return fig


# ---- figure 6: the scale-anchor ablation ----------------------------------------------------------


def fig6(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """The ablation's pre-logit geometry vs step: logit norm, r(h) and c_f r(h) (log y); fraction of
    tokens with a positive margin, cos(grad_h CE, h), and softmax saturation."""
    runs, metrics, width = _at_width(run_dirs, width)
    lacking = runs.loc[~runs["geometry"], "name"].tolist()
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
    panels = [p for p in panels if p[0] in metrics and metrics[p[0]].notna().any()]
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
    _note(
        fig, f"{style_key(runs['variant'])}. Band (with 2+ seeds): 2.5-97.5 percentile over seeds."
    )
    return fig


FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": fig1,
    "fig2": fig2,
    "fig3": fig3,
    "fig4": fig4,
    "fig4b": fig4b,
    "fig6": fig6,
}


def make_figure(
    which: str, run_dirs: Sequence[str | Path], out: str | Path, width: int | None = None
) -> list[Path]:
    """Build figure `which` from the runs and save it as <out stem>.pdf and .png."""
    if which not in FIGURES:
        raise ValueError(f"unknown figure {which!r}; choose from {sorted(FIGURES)}")
    return save_figure(FIGURES[which](run_dirs, width), out)
