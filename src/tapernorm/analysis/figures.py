"""Figures 1-4 and the scale-anchor ablation (fig6) from run directories; each saved as .pdf and .png.

Figures are built on matplotlib Figure objects (no pyplot, no global backend state) and returned, so
callers and tests can inspect them. Across figures each variant has one color; variants whose final norm
is tapered (Final-Taper, All-Taper, All-Taper (+aux)) are dashed, the others solid. Curves are the mean
over the non-diverged seeds of a variant with a shaded 2.5-97.5 percentile band; a diverged run is drawn
as a thin line of its own that ends in an 'x' at its divergence step, and the legend says how many
diverged. The paper's values appear only as a labelled note under a figure.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from ..checkpoint import atomic_write_bytes
from ..config import VARIANTS
from ..pipeline import FIG2_VARIANTS
from . import paper
from .runs import GRAD_COLUMNS, final_tapered, load_runs, pick_width, variant_order

# tab10 blue, green, orange, purple, red, brown, grey and olive (the untied-head runs), cyan (DyT):
# final-tapered dashed, untied heads dotted, the others solid
_TAB10 = sns.color_palette("tab10").as_hex()
COLORS = dict(zip(VARIANTS, [_TAB10[i] for i in (0, 2, 1, 4, 3, 5, 7, 8, 9)], strict=True))
GRAD_TITLES = {
    "grad_attn_qkv": "attention QKV",
    "grad_attn_out": "attention $W_o$",
    "grad_mlp_in": "MLP $W_1$",
    "grad_mlp_out": "MLP $W_2$",
}
BAND = (0.025, 0.975)


def linestyle(variant: str) -> str:
    """Dashed for variants whose final norm is tapered, dotted for the untied-head baseline and
    Internal-Taper (+aux), solid otherwise."""
    if final_tapered(variant):
        return "--"
    return ":" if variant.endswith("_untied") else "-"


def save_figure(fig: Figure, out: str | Path) -> list[Path]:
    """Write <out stem>.pdf and <out stem>.png (dpi 150), each rendered in memory, then written atomically."""
    out = Path(out)
    paths = []
    for fmt, extra in (("pdf", {"metadata": {"CreationDate": None}}), ("png", {"dpi": 150})):
        buf = io.BytesIO()
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
    style = {"color": COLORS[variant], "linestyle": linestyle(variant)}
    label = VARIANTS[variant]["label"]
    if len(bad):
        label += f" ({len(bad)}/{len(mine)} diverged, ×)"
    rows = metrics[(metrics["variant"] == variant) & metrics[column].notna()]
    if rows.empty:  # e.g. c_f r(h) of a variant whose final norm does not taper
        return
    if len(ok):
        wide = rows[rows["run"].isin(ok["run"])].pivot(index="step", columns="run", values=column)
        ax.plot(wide.index, wide.mean(axis=1), label=label, lw=1.6, **style)
        lo, hi = wide.quantile(BAND[0], axis=1), wide.quantile(BAND[1], axis=1)
        ax.fill_between(wide.index, lo, hi, color=COLORS[variant], alpha=0.2, lw=0)
        label = None
    for run in bad.itertuples():
        d = rows[rows["run"] == run.run].sort_values("step")
        ax.plot(d["step"], d[column], lw=0.8, alpha=0.8, label=label, **style)
        label = None
        if len(d):
            ax.plot(
                [run.diverged_step], [d[column].iloc[-1]], "x", color=COLORS[variant], ms=9, mew=2
            )


def _plot_variants(ax: Axes, runs, metrics, column: str, log: bool = False) -> None:
    for variant in variant_order(runs["variant"]):
        plot_variant(ax, runs, metrics, variant, column)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")


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
    ax.set(xlim=(0, 1.25), ylim=(0, 1), aspect="equal")
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
    ax.text(0.34, 0.06, "linear branch (c frozen at taper start)", ha="center", fontsize=9)
    ax.text(0.99, 0.5, "TaperNorm$(h; g)$", ha="left", va="center", fontsize=10)
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
    for step, name in ((run["taper_start"], "taper start"), (run["taper_end"], "taper end")):
        ax_b.axvline(step, color="0.4", ls=":", lw=1)
        ax_b.text(step, 1.06, f"{name}\n(step {step:,})", ha="center", va="bottom", fontsize=8)
    ax_b.set(xlabel="step k", ylabel="gate g(k)", ylim=(-0.05, 1.25))
    ax_b.set_title(
        f"(b) gate schedule logged by run {run['name']} ({run['steps']:,} steps)", fontsize=10
    )
    return fig


# ---- figures 2-4 --------------------------------------------------------------------------------


def fig2(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """Training loss vs step: Baseline vs Internal-Taper (+aux) (and DyT with its untied-head
    baseline, if given) at one width."""
    runs, metrics, width = _at_width(run_dirs, width)
    runs = runs[runs["variant"].isin(FIG2_VARIANTS)]
    missing = {"baseline", "internal_aux"} - set(runs["variant"])
    if missing:
        raise ValueError(
            f"fig2 needs baseline and internal_aux runs at d={width}; missing {missing}"
        )
    fig, (ax,) = _new_figure(1, 1, (6.5, 4.2))
    _plot_variants(ax, runs, metrics, "loss")
    ax.set_ylabel("training loss (CE)")
    ax.set_title(f"Training loss ({_scale(runs)})", fontsize=10)
    ax.legend(fontsize=8)
    ref = paper.FIG2_FINAL_LOSS
    _note(
        fig,
        f"Paper reference ({paper.FIG2_SOURCE}): final training loss ≈{ref['internal_aux']:.2f} "
        f"(Internal-Taper (+aux)) vs ≈{ref['baseline']:.2f} (Baseline).",
    )
    return fig


def fig3(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """Mean logit L2 norm vs step (log y), all variants present at one width."""
    runs, metrics, width = _at_width(run_dirs, width)
    fig, (ax,) = _new_figure(1, 1, (7, 4.5))
    _plot_variants(ax, runs, metrics, "logit_norm", log=True)
    ax.set_ylabel("mean logit norm $\\|z_t\\|_2$")
    ax.set_title(f"Logit norm ({_scale(runs)}; dashed: final norm tapered)", fontsize=10)
    ax.legend(fontsize=8)
    lo, hi = paper.FIG3_ANCHORED_RANGE
    _note(
        fig,
        f"Paper reference ({paper.FIG3_SOURCE}): end of training All-Taper ≈"
        f"{paper.FIG3_END_LOGIT_NORM['all']:.0e}, Final-Taper ≈"
        f"{paper.FIG3_END_LOGIT_NORM['final']:.1e}, anchored runs ≈{lo:.0e}-{hi:.0e}; "
        f"split at ~{paper.FIG3_SPLIT_PROGRESS[0]:.0%}-{paper.FIG3_SPLIT_PROGRESS[1]:.0%} of training.",
    )
    return fig


def fig4(run_dirs: Sequence[str | Path], width: int | None = None) -> Figure:
    """Gradient norms of the four weight types (averaged over blocks) vs step, log y."""
    runs, metrics, width = _at_width(run_dirs, width)
    fig, axes = _new_figure(2, 2, (11, 7.5), sharex=True)
    for ax, column in zip(axes, GRAD_COLUMNS, strict=True):
        _plot_variants(ax, runs, metrics, column, log=True)
        ax.set_title(GRAD_TITLES[column], fontsize=10)
        ax.set_ylabel("gradient Frobenius norm")
    for ax in axes[:2]:
        ax.set_xlabel("")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.suptitle(f"Gradient norms before clipping ({_scale(runs)})", fontsize=11)
    lo, hi = paper.FIG4_NO_FINAL_NORM_GRAD
    _note(
        fig,
        f"Paper reference ({paper.FIG4_SOURCE}): without an anchor, no-final-norm gradient norms "
        f"decay toward ~{lo}-{hi}; with the scale loss All-Taper matches Internal-Taper.",
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
    fig, axes = _new_figure(nrows, ncols, (4.7 * ncols, 4.0 * nrows), sharex=True)
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
    return fig


FIGURES: dict[str, Callable[..., Figure]] = {
    "fig1": fig1,
    "fig2": fig2,
    "fig3": fig3,
    "fig4": fig4,
    "fig6": fig6,
}


def make_figure(
    which: str, run_dirs: Sequence[str | Path], out: str | Path, width: int | None = None
) -> list[Path]:
    """Build figure `which` from the runs and save it as <out stem>.pdf and .png."""
    if which not in FIGURES:
        raise ValueError(f"unknown figure {which!r}; choose from {sorted(FIGURES)}")
    return save_figure(FIGURES[which](run_dirs, width), out)
