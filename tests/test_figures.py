"""Figures read at a glance and by every reader: axes fitted to the variants they show, no two lines
alike for a colour-blind reader (simulated deuteranopia and protanopia), bands that say what they
are, captions as text beside the image (not small print in it), the provenance stamp on every
figure, labels clear of lines, TrueType fonts in PDFs, and the ablation's gradient-norm figure
(claim 5's evidence).

Built from synthetic run directories (config.json, metrics.jsonl, eval.json as `tapernorm train`
writes them) whose curves are known, so no training is needed."""

import base64
import io
import itertools
import json
import re

import matplotlib as mpl
import numpy as np
import pytest
from conftest import tiny_run
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.text import Text
from PIL import Image

from tapernorm.analysis.figures import style as figure_style
from tapernorm.analysis.figures import training as figures
from tapernorm.analysis.runs import CLIPPED_COLUMNS, GRAD_COLUMNS
from tapernorm.analysis.studies import anchor_sweep
from tapernorm.runtime import provenance
from tapernorm.variants import PAPER_VARIANTS, VARIANTS
from tapernorm.workflow.plan import FIG2_VARIANTS

STEPS = 100
# logit norms and gradients of each variant relative to the Baseline's: runs without a final norm
# grow 1.5x, All-Taper (+aux) 1.2x, DyT's are orders of magnitude smaller (as in the run)
LEVEL = {v: 1.0 for v in VARIANTS} | {"final": 1.5, "all": 1.5, "all_aux": 1.2, "dyt": 3e-4}


def fake_run(
    root, variant, seed=0, *, family="pretrain", name=None, anchor=None, level=None, **data
):
    """A run directory with smooth, known curves: every quantity is `level` (default LEVEL[variant])
    times a ramp, seeds 2% apart; gradients after clipping are half those before."""
    name = name or f"{variant}-d64-s{seed}"
    run = root / family / name
    run.mkdir(parents=True)
    cfg = tiny_run(
        root / "data",
        name=f"{family}/{name}",
        variant=variant,
        seed=seed,
        model={"n_embd": 64},
        train={"steps": STEPS, "warmup_steps": 2},
        data=data,
        **({"anchor": anchor} if anchor else {}),
    )
    level = (LEVEL[variant] if level is None else level) * (1 + 0.02 * seed)
    records = []
    for step in range(0, STEPS + 1, 5):
        ramp = 1 + 9 * step / STEPS
        r = {"step": step, "gate": 1 - step / STEPS, "loss": 6 - step / STEPS}
        r |= {"logit_norm": 5 * ramp * level, "prelogit_scale": 0.1 * ramp * level, "s_tgt": 0.1}
        r |= {"margin_pos_frac": step / STEPS, "grad_h_cos": -0.1 * (level - 1)}
        r |= {"saturation": 1 - 0.5 * step / STEPS}
        for i, column in enumerate(GRAD_COLUMNS):
            r[column] = 0.1 * (1 + i / 4) * ramp * level
            r[f"{column}_clipped"] = r[column] / 2
        records.append(r)
    (run / "config.json").write_text(cfg.to_json())
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = {"name": f"{family}/{name}", "variant": variant, "val_loss": 4.0, "diverged": False}
    (run / "eval.json").write_text(json.dumps(result | {"diverged_step": None}))
    return run


@pytest.fixture(scope="module")
def pretrain(tmp_path_factory):
    """Every variant x 2 seeds at d=64."""
    root = tmp_path_factory.mktemp("fake")
    return [fake_run(root, v, s) for v in VARIANTS for s in (0, 1)]


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    """The six paper variants, one seed, on a slice of 2,000 training tokens."""
    root = tmp_path_factory.mktemp("fake_ablation")
    return [fake_run(root, v, family="ablation", train_tokens=2000) for v in PAPER_VARIANTS]


def _labelled(ax):
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def _axes_with(fig, label):
    return [ax for ax in fig.axes if any(ln.get_label() == label for ln in _labelled(ax))]


def _rendered(fig):
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _build(which, pretrain, ablation):
    return figures.FIGURES[which](ablation if which in ("fig4b", "fig6") else pretrain)


# ---- colour vision: Machado, Oliveira and Fernandes (2009), severity 1, in linear RGB ---------------

MACHADO = {
    "deuteranopia": np.array(
        [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.01182, 0.04294, 0.968881],
        ]
    ),
    "protanopia": np.array(
        [
            [0.152286, 1.052583, -0.204868],
            [0.114503, 0.786281, 0.099216],
            [-0.003882, -0.048116, 1.051998],
        ]
    ),
}
SRGB_TO_XYZ = np.array(
    [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
)
D65 = np.array([0.95047, 1.0, 1.08883])
MARGIN = 20.0  # CIELAB delta E (CIE76): two line colours this far apart read as different


def linear(srgb):
    srgb = np.asarray(srgb, dtype=float)
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def simulate(srgb, kind):
    """sRGB colours (..., 3) as a dichromat of `kind` sees them (kind "normal": as they are)."""
    if kind == "normal":
        return np.asarray(srgb, dtype=float)
    lin = np.clip(linear(srgb) @ MACHADO[kind].T, 0, 1)
    return np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055)


def lab(srgb):
    xyz = linear(srgb) @ SRGB_TO_XYZ.T / D65
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack(
        [116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1
    )


def seen_apart(a, b, kind):
    """CIELAB distance of two colours as a dichromat of `kind` sees them."""
    sim = simulate(np.array([to_rgb(a), to_rgb(b)]), kind)
    return float(np.linalg.norm(np.subtract(*lab(sim))))


# the variants drawn on the same axes: each group of figs 3, 4 (paper's; beyond the paper), fig2's
SAME_AXES = [group for _, group in figure_style.variant_groups(VARIANTS)] + [list(FIG2_VARIANTS)]


def confusable(colors, markers, kind):
    """Pairs of variants drawn on the same axes that a dichromat of `kind` could only tell apart by
    the line style: the same marker and colours less than MARGIN apart."""
    return sorted(
        {
            (a, b)
            for group in SAME_AXES
            for a, b in itertools.combinations(group, 2)
            if markers[a] == markers[b] and seen_apart(colors[a], colors[b], kind) < MARGIN
        }
    )


# the styles before this check: tab10 colours, markers for the internal norms only
TAB10 = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
OLD_COLORS = dict(zip(VARIANTS, [TAB10[i] for i in (0, 2, 1, 4, 3, 5, 7, 8, 9)], strict=True))
OLD_MARKERS = {v: "None" for v in VARIANTS} | {"internal": "o", "all": "o"}
OLD_MARKERS |= {"internal_aux": "s", "all_aux": "s", "internal_aux_untied": "s", "dyt": "^"}
TRIO = ("internal", "all", "all_aux")  # fig6's Internal-Taper, All-Taper, All-Taper (+aux)


OLD_CONFUSED = {  # what the check finds in the old styles
    "deuteranopia": [
        ("baseline", "final"),
        ("internal", "all"),
        ("internal_aux", "internal_aux_untied"),
    ],
    "protanopia": [("baseline", "final"), ("internal_aux", "internal_aux_untied")],
}


def hue(srgb) -> float:
    """The CIELAB hue angle in degrees."""
    _, a, b = lab(np.asarray(srgb))
    return float(np.degrees(np.arctan2(b, a)))


@pytest.mark.parametrize("kind", MACHADO)
def test_the_check_catches_the_old_tab10_styles(kind):
    """The old styles fail the check: pairs that differed only in line style for a dichromat."""
    assert confusable(OLD_COLORS, OLD_MARKERS, kind) == OLD_CONFUSED[kind]


def test_the_old_fig6_trio_was_one_olive_hue_under_deuteranopia():
    """tab10's green, red and brown (Internal-Taper, All-Taper, All-Taper (+aux)) simulated: one hue
    (within 3 degrees), Internal-Taper and All-Taper also nearly one lightness, sharing a marker."""
    seen = [simulate(np.array(to_rgb(OLD_COLORS[v])), "deuteranopia") for v in TRIO]
    hues = [hue(c) for c in seen]
    assert max(hues) - min(hues) < 3 and 80 < min(hues) < 110  # yellowish green: olive
    assert seen_apart(OLD_COLORS["internal"], OLD_COLORS["all"], "deuteranopia") < MARGIN / 2


@pytest.mark.parametrize("kind", ["normal", *MACHADO])
def test_no_two_variants_on_the_same_axes_look_alike_to_a_dichromat(kind):
    assert confusable(figure_style.COLORS, figure_style.MARKERS, kind) == []
    for group in SAME_AXES:  # stronger: the colours alone stay apart, and so do the markers
        for a, b in itertools.combinations(group, 2):
            assert seen_apart(figure_style.COLORS[a], figure_style.COLORS[b], kind) >= MARGIN, (
                a,
                b,
            )
            assert figure_style.marker(a) != figure_style.marker(b), (a, b)
    for a, b in itertools.combinations(TRIO, 2):
        assert seen_apart(figure_style.COLORS[a], figure_style.COLORS[b], kind) >= MARGIN


def test_every_variant_has_its_own_colour_marker_and_named_style():
    assert (
        len(set(figure_style.COLORS.values()))
        == len(set(figure_style.MARKERS.values()))
        == len(VARIANTS)
    )
    assert set(figure_style.COLORS) == set(figure_style.MARKERS) == set(VARIANTS)
    key = figure_style.style_key(VARIANTS)
    for v in VARIANTS:
        name = figure_style.COLOR_NAMES[figure_style.COLORS[v]]
        assert f"{VARIANTS[v]['label']}: {name}, " in key


# ---- axes fitted to the variants they show -------------------------------------------------------


@pytest.mark.parametrize("which", ["fig3", "fig4"])
def test_paper_variants_axes_are_not_stretched_by_dyt(pretrain, which):
    fig, _ = getattr(figures, which)(pretrain)
    paper_axes = _axes_with(fig, "Baseline")
    assert paper_axes and not set(paper_axes) & set(_axes_with(fig, "DyT"))
    assert _axes_with(fig, "DyT"), "DyT is drawn, on axes of its own"
    for ax in paper_axes:
        ys = [y for ln in _labelled(ax) for y in ln.get_ydata()]
        lo, hi = ax.get_ylim()
        assert ax.get_yscale() == "log"
        assert hi / lo < 3 * max(ys) / min(ys), (ax.get_title(), (lo, hi), (min(ys), max(ys)))
        assert {ln.get_label() for ln in _labelled(ax)} <= {
            VARIANTS[v]["label"] for v in PAPER_VARIANTS
        }


def test_without_dyt_runs_one_group(pretrain):
    paper_only = [r for r in pretrain if r.name.split("-")[0] in PAPER_VARIANTS]
    assert len(figures.fig3(paper_only)[0].axes) == 1
    assert len(figures.fig4(paper_only)[0].axes) == len(GRAD_COLUMNS)


# ---- every line distinguishable, bands that say what they are --------------------------------------


@pytest.mark.parametrize("which", ["fig2", "fig3", "fig4", "fig4b", "fig6"])
def test_no_two_lines_differ_in_colour_alone(pretrain, ablation, which):
    fig, _ = _build(which, pretrain, ablation)
    checked = 0
    for ax in fig.axes:
        for a, b in itertools.combinations(_labelled(ax), 2):
            pair = (a.get_label(), b.get_label())
            assert a.get_marker() != b.get_marker(), pair
            for kind in MACHADO:
                assert seen_apart(a.get_color(), b.get_color(), kind) >= MARGIN, (kind, pair)
            checked += 1
    assert checked


def _band_spread(band):
    """{x: (low, high)} of a fill_between outline (the lower edge, then the upper one)."""
    spread = {}
    for x, y in band.get_paths()[0].vertices:
        lo, hi = spread.get(round(x, 6), (y, y))
        spread[round(x, 6)] = (min(lo, y), max(hi, y))
    return spread


@pytest.fixture(scope="module")
def seed_counts(tmp_path_factory):
    """Baseline with 1 seed, Internal-Taper with 3, Internal-Taper (+aux) with 10."""
    root = tmp_path_factory.mktemp("fake_seeds")
    counts = {"baseline": 1, "internal": 3, "internal_aux": 10}
    return [fake_run(root, v, s) for v, n in counts.items() for s in range(n)]


def _band_of(ax, variant):
    """The band drawn in `variant`'s colour on `ax`, or None."""
    rgb = np.array(to_rgb(figure_style.COLORS[variant]))
    found = [b for b in ax.collections if np.allclose(b.get_facecolor()[0][:3], rgb)]
    assert len(found) <= 1
    return found[0] if found else None


def test_bands_by_seed_count_none_min_max_percentile(seed_counts):
    fig, caption = figures.fig3(seed_counts)
    (ax,) = fig.axes
    assert len(ax.collections) == 2 and _band_of(ax, "baseline") is None  # a single run: no band
    end = 5 * 10  # logit_norm at the ramp's end, level 1
    three = _band_spread(_band_of(ax, "internal"))
    assert three[STEPS] == pytest.approx((end, end * 1.04))  # min-max of seeds 0, 1, 2
    ten = _band_spread(_band_of(ax, "internal_aux"))
    low, high = np.quantile(end * (1 + 0.02 * np.arange(10)), [0.025, 0.975])
    assert ten[STEPS] == pytest.approx((low, high))  # narrower than the min-max
    assert end < low and high < end * 1.18
    band = figure_style.band_name  # what the band of n seeds is, as captions name it
    assert band(1) == "no band" and "min-max" in band(3) and "percentile" in band(10)
    # the counts differ: each count's band is named with its variants
    label = {v: VARIANTS[v]["label"] for v in ("baseline", "internal", "internal_aux")}
    assert "One seed" in caption and f"{band(1)} ({label['baseline']})" in caption
    assert f"{band(3)} ({label['internal']})" in caption
    assert f"{band(10)} ({label['internal_aux']})" in caption


@pytest.mark.parametrize("which", ["fig2", "fig3", "fig4", "fig4b", "fig6"])
def test_captions_name_the_band_of_the_seed_count(pretrain, ablation, which):
    fig, caption = _build(which, pretrain, ablation)
    if which in ("fig4b", "fig6"):  # one seed each
        assert "One seed" in caption and not fig.axes[0].collections
        assert f"{figure_style.band_name(1)}." in caption  # one count: no variants named
        assert "min-max" not in caption and "percentile" not in caption
    else:
        assert f"{figure_style.band_name(2)}." in caption  # the min-max over the 2 seeds
        assert "percentile" not in caption


def test_seed_bands_are_drawn(pretrain):
    fig, _ = figures.fig3(pretrain)
    for ax in fig.axes:
        bands = ax.collections
        assert len(bands) == len(_labelled(ax))  # one band per variant (2 seeds each)
        for band in bands:
            assert max(hi - lo for lo, hi in _band_spread(band).values()) > 0  # the seeds' spread
            assert band.get_alpha() >= 0.2


# ---- captions beside the image, provenance on it ----------------------------------------------------


def _texts(fig):
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def _pdf_subject(data: bytes) -> str:
    """The PDF's /Subject string (a literal string, UTF-16 with a byte-order mark if not ASCII)."""
    raw = re.search(rb"/Subject \(((?:\\.|[^\\)])*)\)", data, re.S)[1]
    raw = re.sub(rb"\\(.)", rb"\1", raw, flags=re.S)
    return raw[2:].decode("utf-16-be") if raw.startswith(b"\xfe\xff") else raw.decode("latin-1")


@pytest.mark.parametrize("which", ["fig1", "fig2", "fig3", "fig4", "fig4b", "fig6"])
def test_captions_are_text_beside_the_image_with_the_provenance(
    pretrain, ablation, which, tmp_path
):
    fig, caption = _build(which, pretrain, ablation)
    stamp = provenance.stamp("ab" * 32)
    paths = figure_style.save_figure(fig, tmp_path / f"{which}.pdf", caption, stamp)
    assert [p.suffix for p in paths] == [".pdf", ".png", ".html"]
    pdf, png, page = paths
    texts = _texts(fig)
    # nothing of the caption is drawn: no style key, band, paper reference or note in the image
    for t in texts:
        s = t.get_text()
        assert not any(w in s for w in ("percentile", "min-max", "arXiv", "Paper", "Line style")), s
        assert t.get_fontsize() >= 8, (s, t.get_fontsize())  # legible at the report's size
    assert fig.get_supxlabel() == stamp  # one line at the bottom: the stamp
    assert stamp.startswith("tapernorm ") and "config abababababab" in stamp
    # ... in both files' metadata
    assert Image.open(png).text["Subject"] == stamp and _pdf_subject(pdf.read_bytes()) == stamp
    # the page: the PNG itself, then the caption as text, the stamp last
    html = page.read_text()
    data = re.search(r'<img src="data:image/png;base64,([^"]+)"', html)[1]
    assert base64.b64decode(data) == png.read_bytes()
    head = caption.split("\n\n")[0].replace("**", "")
    assert head.split(". ")[1][:40] in html  # the first paragraph's text
    assert html.rindex(stamp) > html.index("<img")
    if which != "fig1":
        assert "<strong>Key.</strong>" in html and "<strong>Lines and bands.</strong>" in html
        assert VARIANTS["baseline"]["label"] + ": black, solid, circles" in html


def test_save_figure_stamps_this_code_by_default(ablation, tmp_path):
    fig, caption = figures.fig6(ablation)
    _, png, _ = figure_style.save_figure(fig, tmp_path / "fig6.pdf", caption)
    assert Image.open(png).text["Subject"] == provenance.stamp()


def test_the_figure_command_stamps_the_config_hash(ablation, tmp_path):
    from tapernorm.cli import main

    out = tmp_path / "fig6_scale_anchor.pdf"
    rc = main(
        ["figure", "fig6", "--runs", *map(str, ablation), "--out", str(out)]
        + ["--config-hash", "cd" * 32]
    )
    assert rc == 0
    stamp = Image.open(out.with_suffix(".png")).text["Subject"]
    assert stamp == provenance.stamp("cd" * 32) and stamp in out.with_suffix(".html").read_text()


# ---- figure 4: the paper's direction, or its opposite, as the data say ---------------------------


@pytest.mark.parametrize("factor", [1.5, 0.5])
def test_fig4_says_whether_its_direction_is_the_papers(tmp_path, factor):
    """No-final-norm gradients 1.5x the final-norm runs': the opposite of the paper's Fig. 4, said
    so; 0.5x: as in the paper, and nothing about an opposite."""
    levels = {v: 1.0 for v in PAPER_VARIANTS} | {"final": factor, "all": factor}
    runs = [fake_run(tmp_path, v, level=lvl) for v, lvl in levels.items()]
    _, caption = figures.fig4(runs)
    assert f"= {factor:.2f}x" in caption and "4 weight types" in caption  # the ratio, its span
    if factor > 1:
        assert "opposite" in caption and "LARGER" in caption
        assert "As in the paper" not in caption
    else:
        assert "As in the paper" in caption and "opposite" not in caption
    assert "~0.005-0.01" in caption  # the paper's value beside ours


def test_fig4_without_all_six_variants_says_nothing_of_the_direction(pretrain):
    _, caption = figures.fig4([r for r in pretrain if not r.name.startswith("final-")])
    assert "Direction" not in caption and "opposite" not in caption


# ---- labels and legends inside the figure, hiding nothing -----------------------------------------


def _texts_inside_axes(fig):
    renderer = _rendered(fig)
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for text in ax.texts:
            t = text.get_window_extent(renderer)
            assert t.x0 >= box.x0 - 1 and t.x1 <= box.x1 + 1 and t.y0 >= box.y0 - 1, (
                f"{text.get_text()!r} runs past its axes"
            )
            assert t.y1 <= box.y1 + 1, f"{text.get_text()!r} runs past its axes"


def _texts_clear_of_lines(fig):
    """No text on an axes (annotations, labels) covers a point of a data line, its segments sampled
    at 200 points each in display coordinates."""
    renderer = _rendered(fig)
    for ax in fig.axes:
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            for line in ax.get_lines():
                xy = line.get_transform().transform(line.get_xydata())
                t = np.linspace(0, 1, 200)[None, :, None]
                pts = (xy[:-1, None] + t * (xy[1:] - xy[:-1])[:, None]).reshape(-1, 2)
                pts = pts if len(pts) else xy
                inside = (
                    (pts[:, 0] > box.x0) & (pts[:, 0] < box.x1)
                    & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)
                )  # fmt: skip
                assert not inside.any(), f"{text.get_text()!r} sits on {line.get_label()!r}"


@pytest.fixture(scope="module")
def sweep(ablation, tmp_path_factory):
    """The ablation (its All-Taper (+aux): Eq. 5 at lambda 0.1) plus All-Taper (+aux) at Eq. 5
    lambda 1, 10, 100 and relative 0.1, 1, whose logit norms fall with lambda, steepest at the last
    point (where a kappa label used to sit on the line)."""
    root = tmp_path_factory.mktemp("fake_sweep")
    points = [("eq5", 1.0, 1.1), ("eq5", 10.0, 0.9), ("eq5", 100.0, 0.5)]
    points += [("relative", 0.1, 1.6), ("relative", 1.0, 1.15)]
    return ablation + [
        fake_run(
            root,
            "all_aux",
            family="anchor_sweep",
            name=f"{form}-lam{lam:g}",
            anchor={"enabled": True, "form": form, "lam": lam},
            level=level,
            train_tokens=2000,
        )
        for form, lam, level in points
    ]


def test_fig7_has_no_text_on_its_axes_and_its_legend_beside_them(sweep):
    fig, caption = anchor_sweep.fig7(sweep)
    assert not [t for ax in fig.axes for t in ax.texts]  # kappa is in the legend and the caption
    _texts_clear_of_lines(fig)
    renderer = _rendered(fig)
    assert fig.legends and not any(ax.get_legend() for ax in fig.axes)
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent(renderer))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"Final-Taper", "All-Taper"} <= set(labels)
    kappa = [s for s in labels if s.startswith("Eq. 5 (paper): κ = ")]
    assert len(kappa) == 1 and kappa[0].count(",") == 3  # one kappa per point
    assert "Eq. 5 (paper) λ=0.1: κ=" in caption and "λ=1: κ=1 (logit norm 1.15x" in caption
    top = fig.axes[0].get_ylim()[1]
    assert all(ln.get_ydata()[0] < top for ln in fig.axes[0].get_lines())  # reference lines shown


def test_fig1_labels_inside_the_axes_and_clear_of_lines(pretrain):
    fig, caption = figures.fig1(pretrain)
    _texts_inside_axes(fig)
    _texts_clear_of_lines(fig)
    assert "taper starts at step" in caption


# ---- TrueType fonts --------------------------------------------------------------------------------


def test_pdf_embeds_truetype_not_type3_fonts(ablation, tmp_path):
    fig, _ = figures.fig6(ablation)  # mathtext in the labels too
    control = io.BytesIO()
    with mpl.rc_context({"pdf.fonttype": 3}):
        fig.savefig(control, format="pdf")
    assert b"/Type3" in control.getvalue()  # the check below can see a Type 3 font
    before = mpl.rcParams["pdf.fonttype"]
    pdf, _, _ = figure_style.save_figure(fig, tmp_path / "fig6.pdf")
    data = pdf.read_bytes()
    assert b"/Type3" not in data and b"/FontFile2" in data  # embedded TrueType programs
    assert mpl.rcParams["pdf.fonttype"] == before  # set for the save only


# ---- figure 4b: the ablation's gradient norms --------------------------------------------------------


def test_fig4b_ablation_gradient_norms(ablation, pretrain, tmp_path):
    dyt = [r for r in pretrain if r.name.startswith("dyt-")]
    fig, caption = figures.fig4b([*ablation, *dyt], width=64)
    rows = fig.subfigs
    assert [r._suptitle.get_text() for r in rows] == ["(a) before clipping", "(b) after clipping"]
    assert len(fig.axes) == 2 * len(GRAD_COLUMNS)
    labels = {ln.get_label() for ax in fig.axes for ln in _labelled(ax)}
    assert labels == {VARIANTS[v]["label"] for v in PAPER_VARIANTS}  # DyT left out
    before, after = fig.axes[0], fig.axes[len(GRAD_COLUMNS)]
    baseline = lambda ax: next(ln for ln in _labelled(ax) if ln.get_label() == "Baseline")  # noqa: E731
    assert max(baseline(after).get_ydata()) == pytest.approx(max(baseline(before).get_ydata()) / 2)
    for ax in fig.axes:  # the end window claim 5 averages over: the last 10% of logged steps
        (span,) = ax.patches
        assert span.get_x() == pytest.approx(STEPS - 10, abs=5)
    ratios = caption.split("Claim 5's ratios here.**", 1)[1].split("\n")[0]
    assert ratios.index("before clipping") < ratios.index("after clipping")
    # per convention: no-final/final-norm, All-Taper (+aux)/Internal-Taper (+aux)
    assert [float(x) for x in re.findall(r"([\d.]+)x", ratios)] == [1.5, 1.2, 1.5, 1.2]
    assert "opposite" in caption  # 1.5x: larger without a final norm, the opposite of the paper
    assert "DyT" not in caption and "dotted" not in caption  # the key names only the styles drawn
    paths = figures.make_figure("fig4b", ablation, tmp_path / "fig4b_ablation_grad_norms.pdf")
    assert [p.suffix for p in paths] == [".pdf", ".png", ".html"]
    assert all(p.stat().st_size for p in paths)


def test_fig4b_without_clipped_gradients_has_one_row(ablation, tmp_path):
    runs = []
    for run in ablation:
        copy = tmp_path / run.name
        copy.mkdir()
        for f in ("config.json", "eval.json"):
            (copy / f).write_text((run / f).read_text())
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        stripped = [{k: v for k, v in r.items() if k not in CLIPPED_COLUMNS} for r in lines]
        (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stripped))
        runs.append(copy)
    fig, caption = figures.fig4b(runs)
    assert len(fig.subfigs) == 1 and len(fig.axes) == len(GRAD_COLUMNS)
    assert "after clipping" not in caption
    with pytest.raises(ValueError, match="paper's variants"):
        figures.fig4b([fake_run(tmp_path, "dyt")])
