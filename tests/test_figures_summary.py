"""The summary figures: the claims' paired gaps (from claims.json's numbers) and the LR grid (from
lr_grid.json), each with a caption stating the numbers drawn, and their CLI."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.document import claim_dyt
from tapernorm.analysis.claims.numbers import record_fields
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.figures import style as figure_style
from tapernorm.analysis.figures.summary import fig_claim_gaps, fig_lr_grid
from tapernorm.analysis.studies.lr_grid import write_summary
from tapernorm.cli import main
from tapernorm.runtime.jsonio import write_json


def _runs(gaps: dict[str, list[float]], base: tuple, baseline: str = "baseline") -> pd.DataFrame:
    rows = []
    for variant, per_seed in {baseline: [0.0] * len(base), **gaps}.items():
        for seed, gap in enumerate(per_seed):
            rows.append(
                {"name": f"{variant}-d64-s{seed}", "variant": variant, "width": 64, "seed": seed,
                 "steps": 600, "lr": 1e-3, "corpus": "shakespeare", "train_tokens": None,
                 "diverged": False, "val_loss": base[seed] * (1 + gap / 100)}
            )  # fmt: skip
    return pd.DataFrame(rows)


def _bullet(caption: str, name: str) -> str:
    """The text of the caption's bullet `name` ("- **Drawn.** ...")."""
    return caption.split(f"**{name}.** ", 1)[1].split("\n")[0]


def _entries(bullet: str) -> list[str]:
    """A bullet's entries: split at "; " outside parentheses."""
    return re.split(r"; (?![^(]*\))", bullet.rstrip("."))


def _pct(x: float) -> str:
    return f"{x:+.2f}%"


@pytest.fixture
def claims_json(tmp_path):
    """A claims.json of claims 1, 2 and the DyT row, computed from constructed runs."""
    runs = pd.concat(
        [
            _runs({"internal_aux": [0.9, 1.4, 1.1], "all_aux": [-2.7, -2.0, -2.5]}, (4, 4.1, 4.2)),
            _runs({"dyt": [10.4]}, (3.6,), baseline="baseline_untied"),
        ],
        ignore_index=True,
    )
    inp = ClaimInputs(runs=runs)
    rows = []
    for number, claim in enumerate(claims.CLAIMS, 1):
        if claim.cells in (claims.claim1, claims.claim2, claim_dyt):
            row = claim.row(inp, number)
            rows.append({**row, **record_fields(row, claim.criterion)})
    rows = [{k: v for k, v in r.items() if k not in ("numbers", "paper_sources")} for r in rows]
    path = tmp_path / "claims.json"
    write_json(path, {"claims": rows})
    return path, rows


def test_the_forest_plot_draws_the_claims_numbers(claims_json):
    path, rows = claims_json
    fig, caption = fig_claim_gaps(path)
    (ax,) = fig.axes
    claim1 = rows[0]
    drawn = f"{claim1['estimate']:+.2f}% [{claim1['ci_low']:+.2f}%, {claim1['ci_high']:+.2f}%]"
    assert claim1["Ours"].startswith(f"d=64: {drawn}")  # the prose's number, drawn
    # the caption states each gap drawn: its estimate, interval and seed pairs
    entries = _entries(_bullet(caption, "Drawn"))
    assert len(entries) == 4
    claim1_at, claim2_at, _, dyt_at = entries
    assert claim1_at.startswith("Claim 1, d=64") and drawn in claim1_at
    assert "3 seed pairs" in claim1_at
    claim2 = rows[1]
    assert claim2["estimate"] == pytest.approx(-2.40, abs=0.005)
    assert claim2_at.startswith("Claim 2, d=64") and _pct(claim2["estimate"]) in claim2_at
    assert "DyT vs Baseline (untied head)" in dyt_at and "+10.40%" in dyt_at
    assert "no interval" in dyt_at and "1 seed pair" in dyt_at
    band = [p for p in ax.patches if p.get_x() == -2.0]
    assert len(band) == 1 and band[0].get_width() == pytest.approx(4.0)  # the ±2% criterion
    # four gaps (claims 1, 2, the DyT row's two arms), each at its estimate
    lines = [ln for ln in ax.lines if ln.get_marker() in figure_style.MARKERS.values()]
    xs = sorted(float(ln.get_xdata()[0]) for ln in lines)
    estimates = [p["estimate"] for r in rows for p in r["parts"] if p["kind"] == "paired_gap"]
    assert xs == pytest.approx(sorted(estimates)) and len(xs) == 4
    colours = {ln.get_color() for ln in lines}
    assert figure_style.COLORS["dyt"] in colours and figure_style.COLORS["all_aux"] in colours


def test_the_forest_plot_needs_paired_gaps(tmp_path):
    path = tmp_path / "claims.json"
    write_json(path, {"claims": [{"Claim": "3. x", "parts": [], "grade": "no"}]})
    with pytest.raises(ValueError, match="no paired gaps"):
        fig_claim_gaps(path)


@pytest.fixture
def grid_json(tmp_path):
    """An lr_grid.json as `tapernorm lr-grid` writes it: two variants at three LRs, two seeds,
    DyT's seed 1 diverged at the largest LR."""
    losses = {
        ("baseline_untied", 1e-3): [3.70, 3.68],
        ("baseline_untied", 3e-3): [3.41, 3.42],
        ("baseline_untied", 1e-2): [3.50, 3.52],
        ("dyt", 1e-3): [4.05, 4.03],
        ("dyt", 3e-3): [3.55, 3.56],
        ("dyt", 1e-2): [3.31, math.inf],
    }
    cells = []
    for (variant, lr), vals in losses.items():
        finite = [v for v in vals if math.isfinite(v)]
        label = {"dyt": "DyT", "baseline_untied": "Baseline (untied head)"}[variant]
        cells.append(
            {"variant": variant, "label": label, "lr": lr, "seeds": 2,
             "diverged": len(vals) - len(finite),
             "val_loss_mean": float(np.mean(vals)) if len(finite) == 2 else math.inf,
             "val_loss_std": float(np.std(vals, ddof=1)) if len(finite) == 2 else math.nan,
             "val_losses": " ".join(f"{v:.4f}" for v in vals)}
        )  # fmt: skip
    gaps = [
        {"variant": "dyt", "label": "DyT", "against": "Baseline (untied head)", "shared_lr": 1e-3,
         "gap_shared_pct": 100 * (4.04 / 3.69 - 1), "best_lr": 3e-3, "baseline_best_lr": 3e-3,
         "gap_best_pct": 100 * (3.555 / 3.415 - 1)}
    ]  # fmt: skip
    scale = {"corpus": "c", "n_embd": 64, "n_layer": 8, "n_head": 4, "block_size": 128}
    scale |= {"steps": 600, "batch_size": 16, "seeds": [0, 1], "lrs": [1e-3, 3e-3, 1e-2]}
    write_summary(cells, gaps, tmp_path, "tapernorm lr-grid --test", scale)
    return tmp_path / "lr_grid.json"


def test_the_lr_grid_figure_draws_loss_against_lr(grid_json):
    fig, caption = fig_lr_grid(grid_json)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    # the caption states each variant's means per LR, its colour and best LR
    base, dyt = _entries(_bullet(caption, "Drawn"))
    means = r"(\d[\d.]*): (\d\.\d{4}|diverged)"
    assert re.findall(means, base) == [("0.001", "3.6900"), ("0.003", "3.4150"), ("0.01", "3.5100")]
    assert re.findall(means, dyt) == [
        ("0.001", "4.0400"),
        ("0.003", "3.5550"),
        ("0.01", "diverged"),
    ]
    for entry, variant in ((base, "baseline_untied"), (dyt, "dyt")):
        colour = figure_style.COLOR_NAMES[figure_style.COLORS[variant]]
        assert f"({colour})" in entry and "best LR 0.003" in entry
    assert "1 diverged seed(s)" in dyt and "diverged seed" not in base
    gaps = _bullet(caption, "Gaps to the matched baseline")
    assert gaps.startswith("DyT vs Baseline (untied head)")
    assert re.findall(r"[+-]\d+\.\d+%", gaps) == ["+9.49%", "+4.10%"]  # shared LR, then best
    assert gaps.index("shared LR") < gaps.index("best LR")
    shared = [ln for ln in ax.lines if ln.get_label() == "shared LR 0.001"]
    assert len(shared) == 1 and list(shared[0].get_xdata()) == [1e-3, 1e-3]
    rings = [ln for ln in ax.lines if ln.get_marker() == "o" and ln.get_markersize() == 17]
    assert sorted(float(r.get_ydata()[0]) for r in rings) == pytest.approx([3.415, 3.555])
    assert all(float(r.get_xdata()[0]) == 3e-3 for r in rings)  # both best at 0.003
    crosses = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(crosses) == 1 and float(crosses[0].get_xdata()[0]) == 1e-2
    seeds = sum(len(c.get_offsets()) for c in ax.collections)
    assert seeds == 11  # every finite seed's point


def test_the_cli_writes_both_figures(claims_json, grid_json, tmp_path):
    path, _ = claims_json
    out = tmp_path / "figs"
    assert main(["figure", "claim_gaps", "--claims", str(path), "--out", str(out / "a.pdf")]) == 0
    assert (
        main(["figure", "lr_grid", "--lr-grid", str(grid_json), "--out", str(out / "b.pdf")]) == 0
    )
    for stem in ("a", "b"):
        made = {p.name.removeprefix(stem) for p in out.glob(f"{stem}.*")}
        assert made == {".pdf", ".png", ".html", ".set.json"}  # the figure and its set's marker
    assert main(["figure", "lr_grid", "--out", str(out / "c.pdf")]) != 0  # no --lr-grid
