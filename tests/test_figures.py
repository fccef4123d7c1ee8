"""Figures read at a glance: axes fitted to the variants they show, no two lines alike, labels inside
their axes, TrueType fonts in PDFs, and the ablation's gradient-norm figure (claim 5's evidence).

Built from synthetic run directories (config.json, metrics.jsonl, eval.json as `tapernorm train`
writes them) whose curves are known, so no training is needed."""

import io
import itertools
import json

import matplotlib as mpl
import pytest
from conftest import tiny_run
from matplotlib.backends.backend_agg import FigureCanvasAgg

from tapernorm.analysis import anchor_sweep, figures
from tapernorm.analysis.runs import CLIPPED_COLUMNS, GRAD_COLUMNS
from tapernorm.config import PAPER_VARIANTS, VARIANTS

STEPS = 100
# logit norms and gradients of each variant relative to the Baseline's: runs without a final norm
# grow 1.5x, All-Taper (+aux) 1.2x, DyT's are orders of magnitude smaller (as in the run)
LEVEL = {v: 1.0 for v in VARIANTS} | {"final": 1.5, "all": 1.5, "all_aux": 1.2, "dyt": 3e-4}


def fake_run(root, variant, seed=0, *, family="pretrain", name=None, anchor=None, **data):
    """A run directory with smooth, known curves: every quantity is LEVEL[variant] times a ramp,
    seeds 2% apart; gradients after clipping are half those before."""
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
    level = LEVEL[variant] * (1 + 0.02 * seed)
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
    (run / "config.json").write_text(json.dumps(cfg))
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


# ---- axes fitted to the variants they show -------------------------------------------------------


@pytest.mark.parametrize("which", ["fig3", "fig4"])
def test_paper_variants_axes_are_not_stretched_by_dyt(pretrain, which):
    fig = getattr(figures, which)(pretrain)
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
    assert len(figures.fig3(paper_only).axes) == 1
    assert len(figures.fig4(paper_only).axes) == len(GRAD_COLUMNS)


# ---- every line distinguishable, seed bands drawn ---------------------------------------------------


@pytest.mark.parametrize("which", ["fig2", "fig3", "fig4", "fig4b", "fig6"])
def test_no_two_lines_differ_in_colour_alone(pretrain, ablation, which):
    fig = figures.FIGURES[which](ablation if which in ("fig4b", "fig6") else pretrain)
    checked = 0
    for ax in fig.axes:
        for a, b in itertools.combinations(_labelled(ax), 2):
            pair = (a.get_label(), b.get_label())
            assert a.get_color() != b.get_color(), pair
            assert (a.get_linestyle(), a.get_marker()) != (b.get_linestyle(), b.get_marker()), pair
            checked += 1
    assert checked


def test_every_variant_has_its_own_style():
    styles = {(figures.linestyle(v), figures.marker(v)) for v in VARIANTS}
    assert len(styles) == len(VARIANTS) == len(set(figures.COLORS.values()))


def test_seed_bands_are_drawn(pretrain):
    fig = figures.fig3(pretrain)
    for ax in fig.axes:
        bands = ax.collections
        assert len(bands) == len(_labelled(ax))  # one band per variant (2 seeds each)
        for band in bands:  # fill_between's outline: the lower edge, then the upper one
            verts = band.get_paths()[0].vertices
            spread = {}
            for x, y in verts:
                lo, hi = spread.get(round(x, 6), (y, y))
                spread[round(x, 6)] = (min(lo, y), max(hi, y))
            assert max(hi - lo for lo, hi in spread.values()) > 0  # the seeds' spread shows
            assert band.get_alpha() >= 0.25


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


@pytest.fixture(scope="module")
def sweep(ablation, tmp_path_factory):
    """The ablation plus All-Taper (+aux) at Eq. 5 lambda 1, 10 and relative 0.1, 1."""
    root = tmp_path_factory.mktemp("fake_sweep")
    points = [("eq5", 1.0), ("eq5", 10.0), ("relative", 0.1), ("relative", 1.0)]
    return ablation + [
        fake_run(
            root,
            "all_aux",
            family="anchor_sweep",
            name=f"{form}-lam{lam:g}",
            anchor={"enabled": True, "form": form, "lam": lam},
            train_tokens=2000,
        )
        for form, lam in points
    ]


def test_fig7_labels_inside_and_legend_beside_the_axes(sweep):
    fig = anchor_sweep.fig7(sweep)
    _texts_inside_axes(fig)
    renderer = _rendered(fig)
    assert fig.legends and not any(ax.get_legend() for ax in fig.axes)
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent(renderer))
    labels = fig.legends[0].get_texts()
    assert {"Final-Taper", "All-Taper"} <= {t.get_text() for t in labels}
    top = fig.axes[0].get_ylim()[1]
    assert all(ln.get_ydata()[0] < top for ln in fig.axes[0].get_lines())  # reference lines shown


def test_fig1_labels_inside_the_axes(pretrain):
    _texts_inside_axes(figures.fig1(pretrain))


# ---- TrueType fonts --------------------------------------------------------------------------------


def test_pdf_embeds_truetype_not_type3_fonts(ablation, tmp_path):
    fig = figures.fig6(ablation)  # mathtext in the labels too
    control = io.BytesIO()
    with mpl.rc_context({"pdf.fonttype": 3}):
        fig.savefig(control, format="pdf")
    assert b"/Type3" in control.getvalue()  # the check below can see a Type 3 font
    before = mpl.rcParams["pdf.fonttype"]
    pdf, _ = figures.save_figure(fig, tmp_path / "fig6.pdf")
    data = pdf.read_bytes()
    assert b"/Type3" not in data and b"/FontFile2" in data  # embedded TrueType programs
    assert mpl.rcParams["pdf.fonttype"] == before  # set for the save only


# ---- figure 4b: the ablation's gradient norms --------------------------------------------------------


def test_fig4b_ablation_gradient_norms(ablation, pretrain, tmp_path):
    dyt = [r for r in pretrain if r.name.startswith("dyt-")]
    fig = figures.fig4b([*ablation, *dyt], width=64)
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
    note = fig._supxlabel.get_text().replace("\n", " ")
    assert "before clipping: no-final/final-norm 1.50-1.50x" in note
    assert "All-Taper (+aux)/Internal-Taper (+aux) 1.20-1.20x" in note
    assert "DyT" not in note and "dotted" not in note  # the key names only the styles drawn
    paths = figures.make_figure("fig4b", ablation, tmp_path / "fig4b_ablation_grad_norms.pdf")
    assert [p.suffix for p in paths] == [".pdf", ".png"] and all(p.stat().st_size for p in paths)


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
    fig = figures.fig4b(runs)
    assert len(fig.subfigs) == 1 and len(fig.axes) == len(GRAD_COLUMNS)
    with pytest.raises(ValueError, match="paper's variants"):
        figures.fig4b([fake_run(tmp_path, "dyt")])
