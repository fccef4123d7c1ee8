"""The files the workflow's rules name (tapernorm.workflow.files, names.model_files, and the lists a
Plan makes of them): the data sets', a run directory's, the outputs of a table or figure, the
committed results the claims read, the figures' runs, the benchmarks' inputs, the manifest's."""

import os
from pathlib import Path

import pytest
import yaml

from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow import files as wf
from tapernorm.workflow.names import model_files, run_dir
from tapernorm.workflow.plan import FIG2_VARIANTS, MANIFEST, table_files
from tapernorm.workflow.training import figure_width, runs_at

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def load(name: str, **changes) -> dict:
    """A shipped config, its top-level sections `changes` replaced, validated."""
    raw = yaml.safe_load((ROOT / "config" / name).read_text())
    return validate_pipeline_config({**raw, **changes}, SCHEMA)


def test_data_files_are_what_prepare_data_writes_and_its_readers_open():
    assert wf.data_files("d", sentencepiece=False) == {
        "train": "d/train.bin",
        "val": "d/val.bin",
        "meta": "d/meta.json",
    }
    assert wf.data_files("d", sentencepiece=True)["tokenizer"] == "d/tokenizer.model"
    ci = load("ci.yaml")
    assert wf.pretrain_data_files(ci) == wf.data_files(wf.PRETRAIN_DATA, sentencepiece=True)
    ci["data"]["tokenizer"] = "gpt2"
    assert "tokenizer" not in wf.pretrain_data_files(ci)
    assert wf.FINETUNE_DATA_FILES == wf.data_files(wf.FINETUNE_DATA, sentencepiece=False)
    assert wf.eval_set_files("pile") == {
        "meta": "data/eval/pile/meta.json",
        "rows": "data/eval/pile/rows.bin",
    }


def test_the_fine_tuning_corpus_is_prepared_with_gpt2s_tokenizer():
    paper = load("paper.yaml")
    settings = wf.finetune_data_config(paper)
    assert settings == {**paper["finetune"]["data"], "tokenizer": "gpt2"}
    assert paper["finetune"]["data"].get("tokenizer") is None  # the config's section is untouched


def test_rehearsal_inputs_only_when_the_config_rehearses():
    assert wf.rehearsal_inputs(load("ci.yaml")) == []
    rehearsal = load("ci.yaml", rehearsal={"inputs": "data/rehearsal", "seed": 0})
    assert wf.rehearsal_inputs(rehearsal) == ["data/rehearsal/standins.json"]


def test_run_directory_files():
    assert model_files("r") == {"config": "r/config.json", "model": "r/model.safetensors"}
    assert model_files("r", prefix="base_") == {
        "base_config": "r/config.json",
        "base_model": "r/model.safetensors",
    }
    assert wf.run_files(["a", "b"], ("x", "y")) == ["a/x", "a/y", "b/x", "b/y"]


def test_outputs_of_tables_and_figures_mark_their_html_for_the_report():
    calls = []

    def report(path, caption, category):
        calls.append((path, caption, category))
        return f"report:{path}"

    figure = wf.with_report(
        wf.figure_files("fig2_train_loss"), "fig2_train_loss", "Figures", report
    )
    assert figure == {
        "pdf": "figures/fig2_train_loss.pdf",
        "png": "figures/fig2_train_loss.png",
        "html": "report:figures/fig2_train_loss.html",
    }
    table = wf.with_report(table_files("table1"), "table1", "Tables", report)
    assert list(table) == ["csv", "md", "tex", "html"] and table["html"].startswith("report:")
    assert calls == [
        ("figures/fig2_train_loss.html", "../report/fig2_train_loss.rst", "Figures"),
        ("results/tables/table1.html", "../report/table1.rst", "Tables"),
    ]


def _write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")


def test_committed_results_are_read_where_the_checkout_has_them(tmp_path, monkeypatch):
    work, checkout = tmp_path / "work", tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    assert wf.committed_lr_grid(str(checkout)) == []
    assert wf.committed_scaling_summary() == [] and wf.committed_gpu_check() == []
    _write(checkout / wf.LR_GRID)  # a run with -d elsewhere: the checkout's grid
    assert wf.committed_lr_grid(str(checkout)) == [str(checkout / wf.LR_GRID)]
    _write(work / wf.LR_GRID)  # the working directory's first
    assert wf.committed_lr_grid(str(checkout)) == [wf.LR_GRID]
    _write(work / wf.SCALING_SUMMARY)
    assert wf.committed_scaling_summary() == [wf.SCALING_SUMMARY]
    for name in ("a-gpu-2026-01-05", "b-gpu-2026-03-01"):
        _write(work / wf.GPU_CHECKS / name / "env.json")
    assert wf.committed_gpu_check() == [f"{wf.GPU_CHECKS}/b-gpu-2026-03-01/env.json"]


def test_each_figure_plots_its_runs():
    ci = load("ci.yaml")
    plan = Plan(ci)
    runs = plan.figure_runs()
    assert list(runs) == plan.figures()
    width = figure_width(plan.pretrain.section)
    assert runs["fig1_gate_schedule"] == [run_dir("pretrain", f"internal_aux-d{width}-s0")]
    plotted = {os.path.basename(d).split("-")[0] for d in runs["fig2_train_loss"]}
    assert plotted == set(FIG2_VARIANTS) & set(ci["pretrain"]["variants"])
    assert runs["fig3_logit_norm"] == plan.pretrain.run_dirs(runs_at(plan.pretrain, width))
    assert runs["fig6_scale_anchor"] == plan.ablation.run_dirs()
    assert runs["fig7_anchor_sweep"] == plan.ablation.run_dirs() + plan.sweep.run_dirs()
    bare = Plan(load("ci.yaml", ablation=None, anchor_sweep=None))
    assert list(bare.figure_runs()) == [
        "fig1_gate_schedule",
        "fig2_train_loss",
        "fig3_logit_norm",
        "fig4_grad_norms",
    ]
    raw = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    raw["pretrain"]["variants"] = ["baseline", "all_aux"]
    no_aux = load("ci.yaml", pretrain=raw["pretrain"], fold={"variants": ["all_aux"]}, bench=None)
    assert Plan(no_aux).figure_runs()["fig1_gate_schedule"] == []  # no Internal-Taper (+aux) run


def test_the_benchmarks_wait_for_the_timed_runs_and_name_them():
    ci = Plan(load("ci.yaml")).bench
    runs = ci.run_dirs()
    inputs = ci.job_inputs()
    assert list(inputs) == [
        *ci.inputs(),
        *("baseline_config", "baseline_model", "tapered_config", "tapered_model"),
        *("dyt_config", "dyt_model"),
    ]
    assert inputs["tapered_model"] == f"{runs['internal_aux']}/model.safetensors"
    assert ci.model_options() == (
        f"--baseline {runs['baseline']} --tapered {runs['internal_aux']} --dyt {runs['dyt']} "
    )
    random = Plan(load("config.yaml")).bench  # random weights: nothing to wait for or name
    assert random.job_inputs() == {} and random.model_options() == ""


def test_the_manifest_hashes_every_file_the_run_read_and_wrote():
    ci = load("ci.yaml")
    plan = Plan(ci)
    analysis = ("config.json", "metrics.jsonl", "eval.json")
    files = plan.manifest_inputs(analysis)
    assert len(files) == len(set(files)) and MANIFEST not in files
    assert set(plan.all_targets()) - set(files) == {MANIFEST}
    assert files[:4] == list(wf.pretrain_data_files(ci).values())
    for run in plan.pretrain.run_dirs() + plan.ablation.run_dirs() + plan.sweep.run_dirs():
        assert {f"{run}/{name}" for name in analysis} <= set(files), run
    assert set(plan.fold_verify() + plan.bench_csvs() + plan.timed_jobs()) <= set(files)
    assert set(wf.FINETUNE_DATA_FILES.values()) <= set(files)
    for eval_set in ci["finetune"]["eval"]["sets"]:
        assert set(wf.eval_set_files(eval_set).values()) <= set(files)
    for run in plan.finetune.run_dirs() + plan.finetune_base.run_dirs():
        assert {f"{run}/config.json", f"{run}/model.safetensors", f"{run}/eval.json"} <= set(files)
    folded = [f for f in files if f.endswith("/folded")]
    assert folded and folded == [os.path.dirname(v) + "/folded" for v in plan.finetune_verify()]
    grid = set(plan.manifest_inputs(analysis, lr_grid=True)) - set(files)
    assert grid == {
        "figures/fig_lr_grid.pdf",
        "figures/fig_lr_grid.png",
        "figures/fig_lr_grid.set.json",
    }
    bare = Plan(load("ci.yaml", finetune=None))
    assert not [f for f in bare.manifest_inputs(analysis) if "finetune" in f]


@pytest.mark.parametrize("name", ["config.yaml", "ci.yaml", "paper.yaml"])
def test_fold_checks_are_one_per_fold_run(name):
    plan = Plan(load(name))
    assert plan.fold_verify() == [f"results/fold/{r}/verify.json" for r in plan.fold_runs()]
