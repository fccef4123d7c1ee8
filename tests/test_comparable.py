"""An aggregate is only as good as what it averages (analysis/comparable.py): runs of mixed
recipes, a run counted twice, a cut or broken record, and data that cannot be read, each refused
in one line (or, with --allow-mixed, said in the output); hand-written run directories."""

import json
import shutil

import pandas as pd
import pytest
from conftest import tiny_run

from tapernorm.analysis import comparable
from tapernorm.analysis.claims import document as claims
from tapernorm.analysis.claims.rows import ClaimInputs
from tapernorm.analysis.claims.scale_card import scale_card
from tapernorm.analysis.runs import load_runs
from tapernorm.analysis.tables import training as tables
from tapernorm.cli import main
from tapernorm.training.identity import data_fingerprint

EVERY = 10


def _run(root, data, variant="baseline", seed=0, steps=40, lr=1e-3, **sections):
    """A finished run's three files as `tapernorm train` writes them (losses set by the seed)."""
    name = f"{variant}-d32-s{seed}"
    cfg = tiny_run(
        data,
        name=name,
        variant=variant,
        seed=seed,
        train={"steps": steps, "lr": lr, "warmup_steps": 2, **sections.pop("train", {})},
        log={"every": EVERY, "ckpt_every": 1000},
        **sections,
    ).to_dict()
    out = root / name
    out.mkdir(parents=True)
    data = {k: v["sha256"] for k, v in data_fingerprint(data).items()}  # as training records it
    cfg["meta"] = {"provenance": {"data_sha256": data}}
    (out / "config.json").write_text(json.dumps({**cfg, "n_params": 1000}, indent=2))
    loss = 4.0 + seed / 100 + (variant != "baseline") / 50
    lines = [
        {"step": s, "lr": lr, "gate": 1.0, "loss": loss, "grad_norm": 0.5}
        for s in [1, *range(EVERY, steps + 1, EVERY)]
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = {"name": name, "variant": variant, "val_loss": loss + 0.1, "steps": steps}
    result.update(weights_step=steps, diverged=False, diverged_step=None, n_params=1000)
    (out / "eval.json").write_text(json.dumps(result))
    return out


@pytest.fixture
def cell(shards_dir, tmp_path):
    """Baseline and Internal-Taper (+aux) at d=32, seeds 0-2, one recipe."""
    return [
        _run(tmp_path / "runs", shards_dir, v, s)
        for v in ("baseline", "internal_aux")
        for s in range(3)
    ]


def _check(dirs, **kw):
    return comparable.check(load_runs(dirs)[0], **kw)


def _edit(path, **changes):
    obj = json.loads(path.read_text())
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        at = obj
        for p in parents:
            at = at[p]
        at[key] = value
    path.write_text(json.dumps(obj))


def test_one_recipe_passes(cell):
    assert _check(cell) == []


def test_fields_that_do_not_change_numbers_are_not_differences(cell):
    _edit(cell[1] / "config.json", train__compile=True, train__device="cpu")
    _edit(cell[2] / "config.json", log__every=5, meta={"provenance": {"host": "elsewhere"}})
    assert _check(cell) == []


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("train__steps", 80, "train.steps: baseline-d32-s0 (40), baseline-d32-s1 (80)"),
        ("train__lr", 2e-3, "train.lr: baseline-d32-s0 (0.001), baseline-d32-s1 (0.002)"),
        ("data__train_tokens", 5000, "data.train_tokens"),
        ("model__n_layer", 3, "model.n_layer"),
    ],
)
def test_runs_of_one_cell_differing_in_the_recipe_are_refused(cell, field, value, shown):
    _edit(cell[1] / "config.json", **{field: value})
    if field == "train__steps":  # a whole 80-step record
        (cell[1] / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "gate": 1.0, "loss": 4.01}) + "\n" for s in (40, 80))
        )
        _edit(cell[1] / "eval.json", steps=80)
    with pytest.raises(ValueError, match="runs of one cell") as e:
        _check(cell)
    assert shown in str(e.value) and "--allow-mixed to average" in str(e.value)


def test_seeds_paired_across_variants_at_two_lrs_are_refused(cell):
    for d in cell[3:]:  # every Internal-Taper (+aux) seed at another LR: each cell is one recipe
        _edit(d / "config.json", train__lr=2e-3)
    with pytest.raises(ValueError, match=r"paired across variants \(d=32\) differ in train.lr"):
        _check(cell)


def test_allow_mixed_lets_it_through_and_the_output_says_so(cell, tmp_path):
    _edit(cell[1] / "config.json", train__lr=2e-3)
    notes = _check(cell, allow_mixed=True)
    assert notes and "train.lr" in notes[0]
    with pytest.raises(ValueError, match="--allow-mixed"):
        tables.make_table("2", cell, tmp_path / "t2")
    md = tables.make_table("2", cell, tmp_path / "t2", allow_mixed=True)
    text = next(p for p in md if p.suffix == ".md").read_text()
    assert notes[0] in text and "--allow-mixed" in text  # the mix let through, said in the table
    out = claims.write_claims(tmp_path / "claims.md", runs=cell, allow_mixed=True)
    record = json.loads(out.with_suffix(".json").read_text())
    assert "train.lr" in record["inputs"]["mixed inputs allowed"]
    assert "Mixed inputs allowed" in out.read_text()


def test_the_cli_refuses_in_one_line_and_takes_allow_mixed(cell, tmp_path, capsys):
    _edit(cell[1] / "config.json", train__lr=2e-3)
    argv = ["table", "2", "--runs", *map(str, cell), "--out", str(tmp_path / "t2")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tapernorm table: error: runs of one cell (d=32, variant=baseline)")
    assert "\n" not in err
    assert main([*argv, "--allow-mixed"]) == 0


@pytest.mark.parametrize("how", ["bak", "renamed"])
def test_a_copy_of_a_run_is_one_run(cell, how):
    copy = cell[0].with_name(cell[0].name + ".bak")
    shutil.copytree(cell[0], copy)
    if how == "renamed":  # the copy's name edited, and copied at another time: still the run
        _edit(copy / "config.json", name="baseline-d32-s3", meta={"provenance": {"started": "x"}})
    with pytest.raises(ValueError, match="are one run .* a copy counts its seed twice"):
        _check([*cell, copy])


def test_a_variant_edited_by_hand_is_refused(cell):
    _edit(cell[3] / "config.json", variant="baseline")  # internal_aux seed 0 now says baseline
    with pytest.raises(ValueError, match="says variant 'baseline' but model.taper is 'internal'"):
        _check(cell)


def test_two_runs_of_one_cell_and_seed_are_refused(cell, shards_dir, tmp_path):
    again = _run(tmp_path / "again", shards_dir, "baseline", 0)
    _edit(again / "eval.json", val_loss=9.0)  # another record, the same cell and seed
    with pytest.raises(ValueError, match="two runs of one cell and seed: baseline-d32-s0"):
        _check([*cell, again])


@pytest.mark.parametrize("lines_kept", [-1, 2])
def test_a_metrics_record_cut_at_a_line_boundary_is_refused(cell, lines_kept):
    path = cell[4] / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:lines_kept]))
    with pytest.raises(ValueError, match=r"internal_aux-d32-s1: metrics.jsonl ends at step \d+ of"):
        _check(cell)


def test_a_diverged_run_may_end_early(cell):
    path = cell[4] / "metrics.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    _edit(cell[4] / "eval.json", diverged=True, diverged_step=15, val_loss=None)
    assert _check(cell) == []


@pytest.mark.parametrize("key", ["loss", "grad_norm"])
def test_a_nan_in_metrics_is_an_error_unless_recorded_as_a_blowup(cell, key):
    path = cell[2] / "metrics.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[2][key] = float("nan")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))  # (json writes NaN)
    with pytest.raises(
        ValueError, match=f"baseline-d32-s2: metrics.jsonl step 20 holds a non-finite {key}"
    ):
        _check(cell)
    _edit(cell[2] / "eval.json", blew_up=True, blowups=1, first_blowup_step=20)
    assert _check(cell) == []


def test_a_non_finite_val_loss_of_a_run_not_diverged_is_an_error(cell):
    _edit(cell[0] / "eval.json", val_loss=None)
    with pytest.raises(ValueError, match="val_loss is None but the run is not marked diverged"):
        _check(cell)


def _card_row(runs, aspect, **inputs) -> str:
    card = scale_card(ClaimInputs(runs=runs, **inputs))
    return dict(zip(card.iloc[:, 0], card.iloc[:, 1], strict=True))[aspect]


def test_an_unreadable_data_dir_is_not_measured_in_the_scale_card(cell):
    assert "training tokens" in _card_row(load_runs(cell)[0], "Corpus, tokenizer")
    for d in cell:
        _edit(d / "config.json", data__dir="data/nowhere")
    runs = load_runs(cell)[0]
    text = _card_row(runs, "Corpus, tokenizer")
    assert text.startswith("not measured: the runs' data directory data/nowhere")
    assert "0 training tokens" not in text and "tokenizer unknown" not in text
    lr = _card_row(runs, "Peak learning rate", lr_grid={"scale": {}, "cells": []})
    assert "is not measured: the runs' data directory data/nowhere" in lr
    assert "another scale" not in lr


def test_the_dyt_claim_is_not_measured_where_the_grid_cannot_be_matched(shards_dir, tmp_path):
    dirs = [
        _run(tmp_path, shards_dir, v, s)
        for v in ("baseline_untied", "internal_aux_untied", "dyt")
        for s in range(2)
    ]
    for d in dirs:
        _edit(d / "config.json", data__dir="data/nowhere")
    runs = load_runs(dirs)[0]
    from tapernorm.analysis.claims.document import claim_dyt

    assert claim_dyt(ClaimInputs(runs=runs))["Holds?"] != "not measured"  # no grid: judged
    row = claim_dyt(ClaimInputs(runs=runs, lr_grid={"scale": {}, "gaps": []}))
    assert row["Holds?"] == "not measured" and "data/nowhere" in row["Comment"]


def test_the_committed_records_pass_the_record_checks():
    """The stability and scaling studies' committed records: complete, each run once."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results/cpu"
    dirs = sorted(p.parent for p in root.glob("*/runs/**/eval.json"))
    if not dirs:
        pytest.skip("no committed records")
    comparable.check_records(load_runs(dirs)[0], by=None)
    assert isinstance(load_runs(dirs[:1])[0], pd.DataFrame)


def test_the_figures_and_the_claims_refuse_a_mix_too(cell, tmp_path):
    from tapernorm.analysis.figures import training as figures

    _edit(cell[1] / "config.json", train__steps=80)
    _edit(cell[1] / "eval.json", steps=80)
    (cell[1] / "metrics.jsonl").write_text(
        json.dumps({"step": 80, "gate": 1.0, "loss": 4.0}) + "\n"
    )
    with pytest.raises(ValueError, match="differ in train.steps.*--allow-mixed to average"):
        figures.make_figure("fig3", cell, tmp_path / "fig3.pdf")
    with pytest.raises(ValueError, match="differ in train.steps.*--allow-mixed to average"):
        claims.write_claims(tmp_path / "claims.md", runs=cell)
    assert not (tmp_path / "claims.md").exists()


def _data_hash(run, train_bin: str = "a" * 64) -> None:
    files = {"meta.json": "m" * 64, "train.bin": train_bin, "val.bin": "v" * 64}
    _edit(run / "config.json", meta={"provenance": {"data_sha256": files}})


@pytest.mark.parametrize(
    ("others", "where"),
    [([1], "runs of one cell"), ([4], "runs of one cell"), ([3, 4, 5], "paired across variants")],
)
def test_runs_that_trained_on_other_data_bytes_are_refused(cell, others, where, caplog):
    for i in others:
        _data_hash(cell[i], train_bin="b" * 64)
    with pytest.raises(ValueError, match=f"{where} .* differ in data sha256") as e:
        _check(cell)
    assert cell[others[0]].name in str(e.value) and "\n" not in str(e.value)
    notes = _check(cell, allow_mixed=True)
    assert any("data sha256" in n for n in notes)
    assert "data hash not recorded" not in caplog.text


@pytest.mark.parametrize("recorded", [0, 2, 5])
def test_older_records_without_the_data_hash_are_said_once_not_refused(cell, recorded, caplog):
    for d in cell[recorded:]:
        _edit(d / "config.json", meta={"provenance": {"host": "older"}})
    with caplog.at_level("WARNING", logger="tapernorm"):
        assert _check(cell) == []
    said = [r for r in caplog.records if "data hash not recorded" in r.getMessage()]
    assert len(said) == 1 and f"in {len(cell) - recorded} run(s)" in said[0].getMessage()
