"""`tapernorm tails` (tapernorm.analysis.studies.tails) and its figure (`tapernorm figure tails`): the
probe's battery of several tiny trained models side by side, one row per model, a blown-up tapered
model's tails against a baseline's, a folded model's against its run's, a fold skipped for a
diverged run, the figure with and without several training lengths, and outputs never replacing a
file the command did not write."""

import json
import math
import shutil

import pandas as pd
import pytest
import torch
from conftest import tiny_run

from tapernorm.analysis.figures.tails import fig_tails
from tapernorm.analysis.studies.tails import DTYPE_KEYS, INFO_KEYS, METRICS, both, number, restored
from tapernorm.cli import main
from tapernorm.runtime.out_files import stamped
from tapernorm.training.checkpoint import load_model, model_tensors, save_tensors
from tapernorm.training.loop import train

FAST = ["--windows", "24", "--search-budget", "96", "--search-length", "16", "--device", "cpu"]
COLUMNS = [
    *INFO_KEYS,
    "gate",
    *(f"{m}_{key}" for key in DTYPE_KEYS for m in METRICS),
    "seconds",
    "note",
    "model_dir",
]


@pytest.fixture(scope="module")
def models(shards_dir, tmp_path_factory):
    """Tiny trained runs (baselines seeds 0 and 1, a shorter baseline, All-Taper (+aux)), the fold
    of the tapered one, a copy of it whose final TaperNorm's g = 0 scale blew up (its record made
    seed 1's: a copy of a run's record given beside it is one run twice, analysis/comparable.py),
    and a fold that was skipped (its run diverged)."""
    root, threads = tmp_path_factory.mktemp("tails_models"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, variant, seed, steps in (
            ("baseline-d32-s0", "baseline", 0, 30),
            ("baseline-d32-s1", "baseline", 1, 30),
            ("all_aux-d32-s0", "all_aux", 0, 40),
            ("short", "baseline", 0, 12),
        ):
            cfg = tiny_run(
                shards_dir, name=name, variant=variant, seed=seed, train={"steps": steps}
            )
            train(cfg, root / name)
        assert main(["fold", "--model", str(root / "all_aux-d32-s0"), "--data", str(shards_dir),
                     "--out", str(root / "fold"), "--device", "cpu"]) == 0  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    blown = root / "blown"
    shutil.copytree(root / "all_aux-d32-s0", blown)
    model = load_model(blown)
    with torch.no_grad():  # g = 0 scales the final norm's input by c * weight_tilde
        model.ln_f.weight_tilde.mul_(1e4)
    save_tensors(blown / "model.safetensors", model_tensors(model))
    config = json.loads((blown / "config.json").read_text())
    (blown / "config.json").write_text(json.dumps({**config, "seed": 1}))
    skipped = root / "fold_skipped"
    (skipped / "folded").mkdir(parents=True)
    (skipped / "verify.json").write_text(
        json.dumps({"model": str(root / "all_aux-d32-s0"), "skipped": "diverged at step 7"})
    )
    return root


def tails(argv: list[str], capsys) -> tuple[int, str, str]:
    status = main(["tails", *argv, *FAST])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def table(models, shards_dir, tmp_path_factory):
    """The table of the two baselines, the tapered run, its blown-up copy, its fold and the
    skipped fold: (stem, the command's printed output)."""
    stem = tmp_path_factory.mktemp("tails_out") / "table_tails"
    runs = [str(models / n) for n in ("all_aux-d32-s0", "baseline-d32-s1", "baseline-d32-s0")]
    folded = [str(models / "fold"), str(models / "fold_skipped" / "folded")]
    argv = ["--runs", *runs, str(models / "blown"), "--folded", *folded]
    assert main(["tails", *argv, "--data", str(shards_dir), "--out", str(stem), *FAST]) == 0
    return stem


def test_the_table_has_one_row_per_model_with_its_columns(table, models, capsys):
    data = pd.read_csv(table.with_suffix(".csv"))
    assert list(data.columns) == COLUMNS and len(data) == 6
    assert list(data["run"]) == [  # Table 1's order, the folded models after the runs, seeds
        "baseline-d32-s0",
        "baseline-d32-s1",
        "all_aux-d32-s0",
        "blown",  # a copy of it (its config is the run's): the run directory's name
        "all_aux-d32-s0",  # the folded models: their run's
        "all_aux-d32-s0",
    ]
    assert list(data["kind"]) == ["run"] * 4 + ["folded"] * 2
    base = data.iloc[0]
    assert base["label"] == "Baseline" and base["width"] == 32 and base["seed"] == 0
    assert base["tokens"] == 30 * 8 * 32 and base["steps"] == 30
    assert base["tokens_per_param"] == pytest.approx(base["tokens"] / base["n_params"])
    assert math.isnan(base["gate"]) and data.iloc[2]["gate"] == 0.0  # tapered: at g = 0
    folded, skipped = data.iloc[4], data.iloc[5]
    assert folded["label"] == "All-Taper (+aux), folded" and folded["steps"] == 40
    assert math.isnan(folded["gate"])  # a folded model has no gate: measured as it is
    assert "diverged" in skipped["note"] and "step 7" in skipped["note"]
    assert math.isnan(skipped["noise_5pct_loss_max_fp32"])
    measured = data.iloc[[0, 1, 2, 4]]  # (not the blown-up copy)
    for key in DTYPE_KEYS:
        assert measured[f"clean_loss_max_{key}"].between(1, 20).all()
        assert (measured[f"noise_5pct_loss_max_{key}"] >= 0).all()
        assert (measured[f"search_ratio_{key}"] > 0).all()
    md = table.with_suffix(".md").read_text()
    # golden: the rendered text (the table's header)
    assert "| Model | Variant | Width | Seed | Steps | Tokens/param |" in md
    assert "all_aux-d32-s0, folded" in md and stamped(table.with_suffix(".md"))


def test_a_blown_up_tapered_model_has_the_heavier_tail(table):
    data = pd.read_csv(table.with_suffix(".csv"))
    base = data[data["label"] == "Baseline"]
    blown = data[data["model_dir"].fillna("").str.endswith("blown")].iloc[0]
    for key in DTYPE_KEYS:
        noisy = f"noise_5pct_loss_max_{key}"
        assert blown[noisy] > 2 * base[noisy].max(), key
        assert blown[f"clean_loss_mean_{key}"] > 2 * base[f"clean_loss_mean_{key}"].max()


def test_a_folded_model_scores_as_its_run_at_g0(table):
    data = pd.read_csv(table.with_suffix(".csv"))
    run = data[(data["kind"] == "run") & (data["label"] == "All-Taper (+aux)")]
    run = run[~run["model_dir"].str.endswith("blown")].iloc[0]
    folded = data[data["kind"] == "folded"].iloc[0]
    for column in ("clean_loss_mean_fp32", "noise_5pct_loss_max_fp32", "noise_20pct_loss_max_fp32"):
        assert folded[column] == pytest.approx(run[column], rel=1e-4), column


def test_the_json_holds_every_battery(table):
    record = json.loads(table.with_suffix(".json").read_text())
    assert record["tails"] == "tails battery" and len(record["models"]) == 6
    assert record["settings"]["max_windows"] == 24 and record["settings"]["search"]["budget"] == 96
    assert record["inputs"]["32"]["clean"]["windows"] == 24
    first = record["models"][0]
    assert first["battery"]["fp32"]["noise_5pct"]["loss"]["n"] == 24
    assert first["battery"]["search"]["evals"] <= 96
    assert first["row"]["run"] == "baseline-d32-s0"
    assert record["models"][-1]["battery"] is None


def test_the_figure_draws_the_models_and_their_training_lengths(
    table, models, shards_dir, tmp_path, capsys
):
    out = tmp_path / "fig_tails.pdf"
    assert main(["figure", "tails", "--tails", str(table.with_suffix(".json")), "--out",
                 str(out)]) == 0  # fmt: skip
    for suffix in (".pdf", ".png", ".html"):
        assert stamped(out.with_suffix(suffix)), suffix
    fig, caption = fig_tails(table.with_suffix(".json"))
    assert len(fig.axes) == 2 and "Drawn in (b)" not in caption
    assert "Baseline (2 models" in caption and "seeds 0, 1)" in caption  # the two baselines
    lengths = tmp_path / "lengths"
    runs = [str(models / n) for n in ("baseline-d32-s0", "short", "all_aux-d32-s0")]
    status, printed, err = tails(["--runs", *runs, "--data", str(shards_dir), "--out",
                                  str(lengths)], capsys)  # fmt: skip
    assert status == 0, err
    assert printed.count("tails: [") == 3 and "tails: [3/3] All-Taper (+aux)" in printed
    fig, caption = fig_tails(lengths.with_suffix(".json"))
    assert len(fig.axes) == 4 and "Drawn in (b)" in caption


def test_it_never_replaces_a_file_it_did_not_write(models, shards_dir, tmp_path, capsys):
    stem = tmp_path / "t"
    argv = ["--runs", str(models / "baseline-d32-s0"), "--data", str(shards_dir)]
    assert tails([*argv, "--out", str(stem)], capsys)[0] == 0
    assert tails([*argv, "--out", str(stem)], capsys)[0] == 0  # its own earlier output
    for suffix, text in ((".md", "my notes\n"), (".json", '{"mine": 1}')):
        mine = tmp_path / f"mine{suffix}"
        mine.write_text(text)
        status, _, err = tails([*argv, "--out", str(tmp_path / "mine")], capsys)
        assert (
            status == 2 and f"{mine} exists and is not an earlier output of tapernorm tails" in err
        )
        assert mine.read_text() == text
        assert not (tmp_path / "mine.csv").exists()  # stopped before any work
        mine.unlink()
    inside = models / "baseline-d32-s0" / "t"
    status, _, err = tails([*argv, "--out", str(inside)], capsys)
    assert status == 2 and "lies inside the run directory" in err


def test_cells_give_bf16_where_it_reads_differently():
    row = {"x_fp32": 4.6283, "x_bf16": 4.6277, "y_fp32": 7.2, "y_bf16": 7.1, "z_fp32": math.inf}
    assert both(row, "x", "loss") == "4.63"
    assert both(row, "y", "loss") == "7.20 / 7.10"
    assert both(row, "z", "loss") == "inf"  # no bf16 number: float32's alone
    assert number(2281.3, "loss") == "2,281" and number(0.25, "fraction") == "25%"
    assert number(3.4e16, "loss") == "3.40e+16"
    back = restored({"a": None, "b": 1.0, "non_finite": {"a": "inf"}})
    assert back == {"a": math.inf, "b": 1.0}


@pytest.mark.parametrize("how", ["lr", "copy", "steps"])
def test_the_runs_side_by_side_are_checked(how, models, shards_dir, tmp_path, capsys):
    """A cell is a width, variant and length (tails.CELL): two LRs in it are refused in one line,
    or said in the caption with --allow-mixed; a copy of a run is refused; another length is not a
    mix (the table shows lengths side by side)."""
    other = tmp_path / "other"
    shutil.copytree(
        models / "baseline-d32-s1" if how == "lr" else models / "baseline-d32-s0", other
    )
    if how == "lr":
        config = json.loads((other / "config.json").read_text())
        config["train"]["lr"] = 2 * config["train"]["lr"]
        (other / "config.json").write_text(json.dumps(config))
    runs = [str(models / "baseline-d32-s0"), str(other if how != "steps" else models / "short")]
    argv = ["--runs", *runs, "--data", str(shards_dir), "--out", str(tmp_path / "t")]
    status, _, err = tails(argv, capsys)
    if how == "steps":
        assert status == 0, err
        return
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.csv").exists()
    if how == "copy":
        assert "are one run" in err
        assert tails([*argv, "--allow-mixed"], capsys)[0] == 2  # never allowed
        return
    assert "runs of one cell (d=32, variant=baseline, steps=30) differ in train.lr" in err
    status, _, err = tails([*argv, "--allow-mixed"], capsys)
    assert status == 0, err
    mixed = json.loads((tmp_path / "t.json").read_text())["mixed inputs allowed"]
    assert "train.lr" in mixed and "d=32" in mixed and "--allow-mixed" in mixed
    assert mixed in (tmp_path / "t.md").read_text()  # said in the caption


def test_float32_alone_leaves_bfloat16_unmeasured_and_says_so(models, shards_dir, tmp_path):
    """--dtypes float32 (the pipeline's default: no emulated bfloat16 pass on a CPU): every
    bfloat16 column is empty, the float32 ones as with both, and the caption says which ran."""
    stem = tmp_path / "table_tails"
    argv = ["--runs", str(models / "baseline-d32-s0"), "--data", str(shards_dir)]
    assert main(["tails", *argv, "--out", str(stem), *FAST, "--dtypes", "float32"]) == 0
    data = pd.read_csv(stem.with_suffix(".csv"))
    assert list(data.columns) == COLUMNS
    bf16 = [c for c in COLUMNS if c.endswith("_bf16")]
    assert bf16 and data[bf16].isna().all().all()
    assert data["clean_loss_mean_fp32"].notna().all()
    record = json.loads(stem.with_suffix(".json").read_text())
    assert record["settings"]["dtypes"] == ["float32"]
    assert "bf16" not in record["models"][0]["battery"] and "fp32" in record["models"][0]["battery"]
    assert "bfloat16 was not measured" in stem.with_suffix(".md").read_text()
