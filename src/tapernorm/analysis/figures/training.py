"""Figures 1-3 and the scale-anchor ablation (fig6) from run directories, and make_figure, which
builds any of them (or figure 4 / 4b, figures.gradients) and saves it as .pdf (TrueType fonts), .png
and .html (the PNG with its caption as text).

Figures are built on matplotlib Figure objects (no pyplot, no global backend state) and returned with
their caption (markdown: what is drawn, this run's numbers, the paper's), so callers and tests can
inspect both. Each variant has one colour from a colour-blind-safe palette, its own marker and a
line style that says what happens to the final norm (figures.style), so no two variants differ in
colour alone. The paper's six variants and the runs beyond the paper (DyT and the untied-head runs
it is matched against) are drawn on separate axes: their scales can differ by orders of magnitude.
Curves are the mean over the non-diverged seeds of a variant, with a band over the seeds where there
are several; a diverged run is drawn as a thin line of its own that ends in an 'x' at its divergence
step, and the legend says how many diverged (figures.curves). The paper's values appear only in the
caption. save_figure writes every figure and stamps it with the code's commit and the config's hash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from ...schedules import gate_at
from ...variants import VARIANTS
from ...workflow.plan import FIG2_VARIANTS
from .. import comparable, paper
from ..runs import load_runs, val_records, variant_order
from .curves import (
    end_values,
    legend_below,
    plot_variants,
    runs_at_width,
    scale_title,
    slice_text,
)
from .gradients import fig4, fig4b
from .style import (
    COLORS,
    bands_text,
    caption_text,
    new_figure,
    save_figure,
    style_key,
    variant_groups,
)

# ---- figure 1: the layer and the gate schedule ---------------------------------------------------


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
    runs, metrics, width = runs_at_width(run_dirs, width)
    tapered = runs[runs["final_taper"] | runs["internal_taper"]]
    tapered = tapered.sort_values(["diverged", "seed", "variant"])  # a finished run first
    if tapered.empty:
        raise ValueError(f"fig1 needs a run with tapered norms at width {width}")
    run = tapered.iloc[0]
    gate = metrics[metrics["run"] == run["run"]].sort_values("step")
    gate = gate[gate["gate"].notna()] if "gate" in gate else gate.assign(gate=[])
    fig, (ax_a, ax_b) = new_figure(1, 2, (11, 4))
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


# ---- figures 2 and 3 -----------------------------------------------------------------------------


def fig2(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """Training loss vs step: Baseline vs Internal-Taper (+aux) (and DyT with its untied-head
    baseline, if given) at one width; one axes (the losses share a scale)."""
    runs, metrics, width = runs_at_width(run_dirs, width)
    runs = runs[runs["variant"].isin(FIG2_VARIANTS)]
    missing = {"baseline", "internal_aux"} - set(runs["variant"])
    if missing:
        raise ValueError(
            f"fig2 needs baseline and internal_aux runs at d={width}; missing {missing}"
        )
    val = val_records(runs)
    fig, axes = new_figure(1, 2, (11.5, 4.8))
    plot_variants(axes[0], runs, metrics, "loss")
    axes[0].set_ylabel("training loss (CE)")
    axes[0].set_title("(a) training loss", fontsize=10)
    plot_variants(axes[1], runs, val, "val_loss")
    if val.empty:
        axes[1].text(0.5, 0.5, "no validation records", ha="center", transform=axes[1].transAxes)
    axes[1].set_ylabel("validation loss (CE)")
    axes[1].set_title("(b) validation loss", fontsize=10)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            legend_below(ax)
    fig.suptitle(f"Training and validation loss ({scale_title(runs)})", fontsize=11)
    variants = variant_order(runs["variant"])
    ref = paper.FIG2_FINAL_LOSS
    claimed = [v for v in variants if VARIANTS[v].get("gap_claim") in ("1", "2")]
    compared = [VARIANTS[v]["label"] for v in claimed]
    caption = caption_text(
        f"**Figure 2.** (a) Training loss (cross-entropy) vs step at {scale_title(runs)}: Baseline "
        f"and {' and '.join(compared)}"
        + (
            ", and DyT with the untied-head runs it is matched against"
            if set(variants) - {"baseline", *claimed}
            else ""
        )
        + ". (b) Validation loss on the fixed validation windows at each periodic evaluation "
        "(log.eval_every), every TaperNorm at the gate the run held at that step (1 before the "
        "taper), and at the end at g=0"
        + (
            ""
            if len(val["step"].unique()) > len(runs)
            else " (only the final evaluation: the runs logged no periodic one)"
        )  # fmt: skip
        + ".",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here", end_values(runs, "loss", variants) + "."),
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
    runs, metrics, width = runs_at_width(run_dirs, width)
    groups = variant_groups(runs["variant"])
    fig, axes = new_figure(1, len(groups), (6.2 * len(groups), 5.0))
    for i, (ax, (title, variants)) in enumerate(zip(axes, groups, strict=True)):
        plot_variants(ax, runs, metrics, "logit_norm", variants, log=True)
        ax.set_ylabel("mean logit norm $\\|z_t\\|_2$")
        ax.set_title(f"({'ab'[i]}) {title}", fontsize=10)
        legend_below(ax)
    fig.suptitle(f"Logit norm ({scale_title(runs)})", fontsize=11)
    variants = variant_order(runs["variant"])
    lo, hi = paper.FIG3_ANCHORED_RANGE
    split = paper.FIG3_SPLIT_PROGRESS
    caption = caption_text(
        f"**Figure 3.** Mean logit L2 norm vs step (log scale) at {scale_title(runs)}: (a) the paper's "
        "variants"
        + (
            "; (b) DyT and the untied-head runs it is matched against, on axes of their own"
            if len(groups) > 1
            else ""
        )
        + ". Removing the final norm lets the logit scale grow (logit chasing).",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here", end_values(runs, "logit_norm", variants) + "."),
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


# ---- figure 6: the scale-anchor ablation ---------------------------------------------------------


def fig6(run_dirs: Sequence[str | Path], width: int | None = None) -> tuple[Figure, str]:
    """The ablation's pre-logit geometry vs step: logit norm, r(h) and c_f r(h) (log y); fraction of
    tokens with a positive margin, cos(grad_h CE, h), and softmax saturation."""
    runs, metrics, width = runs_at_width(run_dirs, width)
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
    fig, axes = new_figure(nrows, ncols, (4.7 * ncols, 4.0 * nrows + 0.4), sharex=True)
    for ax, (column, ylabel, title) in zip(axes, panels, strict=False):
        log = column in ("logit_norm", "prelogit_scale", "final_c_r")
        plot_variants(ax, runs, metrics, column, log=log)
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
    data = slice_text(runs)
    fig.suptitle(f"Scale-anchor ablation ({scale_title(runs)}{data})", fontsize=11)
    variants = variant_order(runs["variant"])
    caption = caption_text(
        "**Figure 6** (not in the paper). The scale-anchor ablation, a small slice of the corpus "
        f"trained for many epochs ({scale_title(runs)}{data}), vs step: the mean logit norm, the mean "
        "pre-logit scale r(h) (what Eq. 5's scale loss holds at its target) and the final taper's "
        "scale c_f·r(h) over a norm's (1 = what an RMSNorm gives; only variants whose final norm "
        "tapers), on log scales; the fraction of tokens with a positive margin; the mean cosine "
        "between the loss gradient at the pre-logit state and that state (about 0 with a final "
        "norm, Prop. 4.1; negative without one once margins are positive, Prop. 4.2; dotted: 0); "
        "softmax saturation, the mean ||softmax(z) - e_y||, the size of the loss gradient with "
        "respect to the logits.",
        ("Key", style_key(variants)),
        ("Lines and bands", bands_text(runs, variants)),
        ("End of training here (logit norm)", end_values(runs, "logit_norm", variants) + "."),
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
    allow_mixed: bool = False,
) -> list[Path]:
    """Build figure `which` from the runs and save it as <out stem>.pdf, .png and .html, stamped
    with `stamp` (default: provenance.stamp()). The runs are checked comparable
    (comparable.check); `allow_mixed` lets mixed recipes through, and the caption says so."""
    if which not in FIGURES:
        raise ValueError(f"unknown figure {which!r}; choose from {sorted(FIGURES)}")
    notes = comparable.check(load_runs(run_dirs)[0], allow_mixed=allow_mixed)
    fig, caption = FIGURES[which](run_dirs, width)
    return save_figure(fig, out, comparable.with_mixed(caption, notes), stamp)
