"""The scale loss's dose-response: table_anchor and fig7 from the ablation and the anchor_sweep runs.

Every All-Taper (+aux) run among the inputs is one point (form, lambda); the ablation's Baseline gives
the logit norm that anchored training reaches, its Final-Taper and All-Taper runs the unanchored one.
Per point: the end logit norm over the baseline's, the end pre-logit scale over the frozen target
r(h)/s_tgt, and the dimensionless stiffness kappa of the restoring force on log r (Prop. 4.3 with
r - s_tgt ~ s_tgt * ln(r/s_tgt)): kappa = lambda * s_tgt^2 for Eq. 5, lambda for the relative form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ...variants import VARIANTS
from .. import comparable
from ..figures.style import COLORS, LINE_NAMES, caption_text, new_figure, save_figure
from ..runs import diverged_text, load_runs
from ..tables.write import write_table

# claim 4's "close to the baseline": claims.chasing.CLOSE_FACTOR, which imported here would close
# an import cycle (claim 4 reads this module's sweep points); a test holds the two equal
HOLD_FACTOR = 1.5
FORM_LABELS = {"eq5": "Eq. 5 (paper)", "relative": "relative (ours)"}


def _where(points: pd.DataFrame) -> str:
    """'d=64, L=4, 1,200 steps' of the sweep points (one run per point)."""
    widths = "/".join(str(w) for w in sorted(points["width"].unique()))
    layers = "/".join(str(n) for n in sorted(points["n_layer"].unique()))
    steps = "/".join(f"{s:,}" for s in sorted(points["steps"].unique()))
    return f"d={widths}, L={layers}, {steps} steps"


def stiffness(form: str, lam: float, s_tgt: float) -> float:
    """kappa: the restoring force on ln r per unit deviation, over 2 (see the module docstring)."""
    return lam * s_tgt**2 if form == "eq5" else lam


def sweep_points(
    runs: pd.DataFrame, need_baseline: bool = True
) -> tuple[pd.DataFrame, dict[str, float]]:
    """(one row per All-Taper (+aux) run sorted by form and lambda, reference end logit norms of
    the baseline and the unanchored variants). Raises if the baseline is missing, or (unless
    `need_baseline` is false: the ratios to it are then NaN) if every Baseline run diverged."""
    ok = runs[~runs["diverged"]]
    base = ok[ok["variant"] == "baseline"]
    if base.empty and (need_baseline or not (runs["variant"] == "baseline").any()):
        raise ValueError("the scale-loss sweep needs a non-diverged Baseline run of the ablation")
    ref = {"baseline": float(base["logit_norm_end"].mean()) if len(base) else math.nan}
    for v in ("final", "all"):
        if (ok["variant"] == v).any():
            ref[v] = float(ok.loc[ok["variant"] == v, "logit_norm_end"].mean())
    points = runs[runs["variant"] == "all_aux"].copy()
    if points.empty:
        raise ValueError("the scale-loss sweep needs All-Taper (+aux) runs")
    points["logit_ratio"] = points["logit_norm_end"] / ref["baseline"]
    points["scale_ratio"] = points["prelogit_scale_end"] / points["s_tgt"]
    points["kappa"] = [
        stiffness(f, lam, s)
        for f, lam, s in zip(
            points["anchor_form"], points["anchor_lam"], points["s_tgt"], strict=True
        )
    ]
    return points.sort_values(["anchor_form", "anchor_lam"]), ref


def _norm(value: float) -> str:
    return f"{value:.3g}" if math.isfinite(value) else "— (diverged)"


def baseline_note(runs: pd.DataFrame) -> str:
    """Why the ratios to the Baseline are missing: every Baseline run of the ablation diverged
    ('' when one did not)."""
    base = runs[runs["variant"] == "baseline"]
    if base.empty or not base["diverged"].all():
        return ""
    return (
        f" No ratio to the Baseline (—): every Baseline run of the ablation diverged "
        f"({diverged_text(base)})."
    )


def table_anchor(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    points, ref = sweep_points(runs, need_baseline=False)
    no_base = not math.isfinite(ref["baseline"])
    rows = []
    for p in points.itertuples():
        rows.append(
            {
                "Scale loss": FORM_LABELS[p.anchor_form],
                "lambda": f"{p.anchor_lam:g}",
                "s_tgt": f"{p.s_tgt:.3g}",
                "kappa": f"{p.kappa:.3g}",
                "r(h)/s_tgt (end)": "diverged" if p.diverged else f"{p.scale_ratio:.2f}",
                "Logit norm / Baseline (end)": "diverged"
                if p.diverged
                else "—"
                if no_base
                else f"{p.logit_ratio:.2f}",
                f"Holds (<= {HOLD_FACTOR:g}x)": "—"
                if p.diverged or no_base
                else ("yes" if p.logit_ratio <= HOLD_FACTOR else "no"),
                "Val loss": "—" if p.diverged else f"{p.val_loss:.4f}",
            }
        )
    unanchored = ", ".join(
        f"{VARIANTS[v]['label']} {ref[v] / ref['baseline']:.2f}x"
        for v in ("final", "all")
        if v in ref and not no_base
    )
    caption = (
        "**Scale-loss dose-response** (our experiment, beyond the paper): All-Taper (+aux) of the "
        f"scale-anchor ablation ({_where(points)}, one run per point) at several weights lambda, "
        "with the paper's Eq. 5 lambda * mean (r - s_tgt)^2 and our scale-invariant form "
        "lambda * mean (r/s_tgt - 1)^2. "
        "End = mean over the last 10% of logged steps. kappa = the stiffness of the restoring force on "
        "ln r: lambda * s_tgt^2 for Eq. 5 (so the same lambda holds a small residual stream loosely), "
        f"lambda for the relative form. Baseline end logit norm {_norm(ref['baseline'])}"
        + (
            f"; unanchored, over the Baseline's: {unanchored} (claim 3 divides by the mean of the "
            "three variants that keep a final norm, so its ratios are slightly smaller)."
            if unanchored
            else "."
        )
        + _val_loss_note(points)
        + baseline_note(runs)
        + (f" Diverged points: {diverged_text(points)}." if points["diverged"].any() else "")
    )
    return pd.DataFrame(rows), caption


def _val_loss_note(points: pd.DataFrame) -> str:
    """Why the val-loss column can be worse than a uniform guess: the ablation memorises a slice."""
    ok = points[~points["diverged"]]
    vocabs = ok["vocab_size"].dropna()
    vocab = int(vocabs.iloc[0]) if len(vocabs) else 0
    uniform = math.log(vocab) if vocab else math.inf
    above = int((ok["val_loss"] > uniform).sum())
    if not above:
        return ""
    tokens = ok["train_tokens"].dropna()
    slice_ = f"the first {int(tokens.iloc[0]):,} training tokens" if len(tokens) else "its data"
    return (
        f" Val loss is above ln {vocab} = {uniform:.2f} (a uniform guess) at {above} of {len(ok)} "
        f"points: the ablation trains on {slice_} for {_where(ok).split(', ')[-1]} and "
        "memorises them, so this column only shows that a point trained without diverging, not "
        "how well it models language; the sweep is read by its logit and scale ratios."
    )


def _kappas(part: pd.DataFrame) -> str:
    """'κ = 0.0061, 0.061, 0.61' of one form's points, in order of lambda."""
    return "κ = " + ", ".join(f"{k:.2g}" for k in part["kappa"])


def fig7(run_dirs: Sequence[str | Path]) -> tuple[Figure, str]:
    """End logit norm over the baseline's and r(h)/s_tgt against lambda, one line per form (its
    points' stiffness kappa in its legend entry); the legend beside the axes, no text on them."""
    runs, _ = load_runs(run_dirs)
    points, ref = sweep_points(runs, need_baseline=False)
    where = _where(points)
    diverged = points[points["diverged"]]
    points = points[~points["diverged"]]
    with_ratio = math.isfinite(ref["baseline"])  # else every Baseline run diverged
    fig, axes = new_figure(1, 2, (11, 4.2))
    kappas = _plot_points(axes, points, with_ratio)
    refs, unanchored = _plot_references(axes[0], ref)
    _label_axes(axes, refs, points, with_ratio)
    _fig7_legend(fig, axes, with_ratio)
    fig.suptitle(f"Scale loss dose-response: All-Taper (+aux), {where}", fontsize=11)
    caption = caption_text(
        "**Figure 7** (not in the paper). The scale loss's dose-response: All-Taper (+aux) of the "
        f"scale-anchor ablation ({where}, one run per point) retrained at other "
        "scale-loss weights λ, with the paper's Eq. 5 (circles) and our relative form (squares). "
        "Left: the end logit norm over the Baseline's; horizontal lines: the unanchored "
        f"Final-Taper (dashed) and All-Taper (dotted) runs; grey band: within {HOLD_FACTOR:g}x of "
        "the Baseline. Right: the end pre-logit scale r(h) over its target s_tgt (dotted: r(h) = "
        "s_tgt). End = the mean over the last 10% of logged steps. κ, in the legend: the stiffness "
        "of the restoring force on ln r (Prop. 4.3), λ·s_tgt² for Eq. 5, λ for the relative form.",
        ("Points", "; ".join(kappas) + "."),
        (
            "References here",
            f"Baseline end logit norm {_norm(ref['baseline'])}"
            + (f"; unanchored, over it: {', '.join(unanchored)}" if unanchored else "")
            + "."
            + baseline_note(runs),
        ),
        ("Left out", _left_out(diverged)),
    )
    return fig, caption


def _plot_points(axes, points: pd.DataFrame, with_ratio: bool) -> list[str]:
    """One line per form: the logit-norm ratio (left, where there is a baseline to divide by) and
    r(h)/s_tgt (right) against lambda. Returns each form's points as the caption lists them."""
    markers = {"eq5": "o", "relative": "s"}
    colors = {"eq5": COLORS["all_aux"], "relative": COLORS["internal_aux"]}
    kappas = []
    for form, part in points.groupby("anchor_form"):
        label = f"{FORM_LABELS[form]}: {_kappas(part)}"
        style = {"marker": markers[form], "color": colors[form], "label": label}
        if with_ratio:
            axes[0].plot(part["anchor_lam"], part["logit_ratio"], **style)
        axes[1].plot(part["anchor_lam"], part["scale_ratio"], **style)
        kappas.append(
            f"{FORM_LABELS[form]} "
            + ", ".join(
                f"λ={p.anchor_lam:g}: κ={p.kappa:.2g} (logit norm {p.logit_ratio:.2f}x, "
                f"r(h)/s_tgt {p.scale_ratio:.2f})"
                for p in part.itertuples()
            )
        )
    return kappas


def _plot_references(ax, ref: dict[str, float]) -> tuple[list[float], list[str]]:
    """The unanchored Final-Taper and All-Taper runs' logit norm over the baseline's, as horizontal
    lines on `ax`: (the ratios drawn, 1 first; each as the caption names it)."""
    refs, unanchored = [1.0], []
    for v, ls in (("final", "--"), ("all", ":")):
        if v in ref and math.isfinite(ref["baseline"]):
            refs.append(ref[v] / ref["baseline"])
            ax.axhline(refs[-1], color=COLORS[v], ls=ls, label=f"{VARIANTS[v]['label']}")
            unanchored.append(f"{VARIANTS[v]['label']} {refs[-1]:.2f}x ({LINE_NAMES[ls]})")
    return refs, unanchored


def _label_axes(axes, refs: list[float], points: pd.DataFrame, with_ratio: bool) -> None:
    """The band and line each panel is read against, its limits and its labels."""
    axes[0].axhspan(1 / HOLD_FACTOR, HOLD_FACTOR, color="0.85", zorder=0, label="within 1.5x")
    axes[0].set_ylabel("end logit norm / Baseline's")
    finite = [x for x in [*refs, *points["logit_ratio"]] if math.isfinite(x)]
    axes[0].set_ylim(0, 1.15 * max([*finite, HOLD_FACTOR]))
    if not with_ratio:
        axes[0].text(
            0.5,
            0.5,
            "no ratio: every Baseline run diverged",
            ha="center",
            transform=axes[0].transAxes,
            fontsize=9,
        )
    axes[1].axhline(1.0, color="0.3", ls=":", lw=1, label="$r(h) = s_{tgt}$")
    axes[1].set_ylabel("end $r(h)$ / $s_{tgt}$")
    axes[1].set_ylim(0, 1.15 * max([1.0, *points["scale_ratio"]]))
    for ax in axes:
        ax.set_xscale("log")
        ax.margins(x=0.12)
        ax.set_xlabel("scale-loss weight $\\lambda$")


def _fig7_legend(fig: Figure, axes, with_ratio: bool) -> None:
    """One legend beside both panels: the left panel's entries, then the right's r(h) = s_tgt line
    (and, where the left panel has no points, the right panel's points first)."""
    handles, labels = axes[0].get_legend_handles_labels()
    extra = axes[1].get_legend_handles_labels()
    if not with_ratio:  # the points are on the right-hand axes only
        handles, labels = extra[0][:-1] + handles, extra[1][:-1] + labels
    fig.legend(
        handles + extra[0][-1:], labels + extra[1][-1:], loc="outside right upper", fontsize=8
    )


def _left_out(diverged: pd.DataFrame) -> str:
    """The caption's 'Left out': the diverged sweep points ('' if none)."""
    if not len(diverged):
        return ""
    return (
        f"{len(diverged)} diverged point(s): "
        + ", ".join(
            f"{FORM_LABELS[p.anchor_form]} λ={p.anchor_lam:g} ({p.name} at step {p.diverged_step})"
            for p in diverged.itertuples()
        )
        + "."
    )


def make_anchor_table(
    run_dirs: Sequence[str | Path],
    out_stem: str | Path,
    config_sha256: str | None = None,
    rehearsal: bool = False,
    allow_mixed: bool = False,
) -> list[Path]:
    """The scale-loss sweep's table, its runs checked comparable per weight (comparable.check)."""
    runs, _ = load_runs(run_dirs)
    notes = comparable.check(runs, comparable.SWEEP_CELL, allow_mixed)
    df, caption = table_anchor(runs)
    caption = comparable.with_mixed(caption, notes)
    return write_table(df, out_stem, caption, config_sha256, rehearsal)


def make_fig7(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    stamp: str | None = None,
    allow_mixed: bool = False,
) -> list[Path]:
    """Figure 7 from the ablation and anchor_sweep runs, saved as <out stem>.pdf, .png and .html
    (the runs checked comparable per weight, as the table)."""
    notes = comparable.check(load_runs(run_dirs)[0], comparable.SWEEP_CELL, allow_mixed)
    fig, caption = fig7(run_dirs)
    return save_figure(fig, out, comparable.with_mixed(caption, notes), stamp)
