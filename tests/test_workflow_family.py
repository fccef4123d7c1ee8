"""A run family is one record of rows (workflow.family.Family), built by one function of the config
per family: its runs in order, each run's recipe, what its jobs ask for."""

import copy
from pathlib import Path

import pytest

from tapernorm.workflow import Plan, read_config_files, validate_pipeline_config
from tapernorm.workflow import finetune as wft
from tapernorm.workflow import scaling as wsc
from tapernorm.workflow import stability as wst
from tapernorm.workflow import training as wtr

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def load(*names: str) -> dict:
    files = [ROOT / "config" / name for name in names]  # merged as --configfile A B merges them
    return validate_pipeline_config(read_config_files(files, SCHEMA), SCHEMA)


def test_a_family_is_its_rows_in_order_and_refuses_a_run_not_there():
    config = load("ci.yaml")
    fam = wtr.pretrain(config)
    sec = config["pretrain"]
    assert fam.runs() == list(fam.recipes)
    assert fam.runs()[0] == f"{sec['variants'][0]}-d{sec['widths'][0]}-s0"
    run = fam.runs()[-1]
    spec = fam.spec(run, "data/x")
    assert spec["name"] == f"pretrain/{run}" and spec["data"]["dir"] == "data/x"
    assert fam.run_config(run, "data/x").name == f"pretrain/{run}"
    with pytest.raises(ValueError, match="run nope-d32-s0 is not part of the pretrain family"):
        fam.run_config("nope-d32-s0", "d")
    assert wtr.runs_at(fam, sec["widths"][0]) == [
        r for r in fam.runs() if f"-d{sec['widths'][0]}-" in r
    ]


def test_building_every_recipe_leaves_the_config_as_it_was():
    """A recipe returns a spec of its own each time: a change to one (a factor's, a caller's)
    reaches neither the config nor the next spec."""
    config = load("config.yaml", "stability.yaml")
    before = copy.deepcopy(config)
    plan = Plan(config)
    for fam in plan.training():
        for run in fam.runs():
            fam.spec(run, "d")
    assert config == before
    fam = plan.stability_factors
    run = fam.runs()[0]
    first = fam.spec(run, "d")
    first["train"]["lr"], first["model"]["n_layer"] = 9.0, 99
    again = fam.spec(run, "d")
    assert again["train"]["lr"] != 9.0 and again["model"]["n_layer"] != 99


def test_job_records_minutes_and_gpus_follow_the_family():
    ci = Plan(load("ci.yaml"))
    run = ci.pretrain.runs()[0]
    assert ci.pretrain.job_records(root=None)[0] == f"train/pretrain/{run}.tsv"
    assert ci.finetune.job_records(root=None)[0] == f"finetune/{ci.finetune.runs()[0]}.tsv"
    (model,) = ci.finetune_base.runs()
    assert ci.finetune_base.job_records(root=None) == [f"pretrain_finetune_base/{model}.tsv"]
    cfg = ci.pretrain.run_config(run, "d")
    assert ci.pretrain.minutes(cfg) == 30  # no gpu_step_ms: the estimate's default
    assert ci.pretrain.gpus(run) == 0  # a cpu family holds none
    paper = Plan(load("paper.yaml"))
    assert paper.pretrain.gpus(paper.pretrain.runs()[0]) == 1
    assert {r: paper.finetune.gpus(r) for r in wft.runs_of(paper.finetune, ["vanilla"])} == {
        "vanilla-gpt2": 1,
        "vanilla-gpt2-medium": 1,
        "vanilla-gpt2-large": 2,
        "vanilla-gpt2-xl": 4,
    }
    study = Plan(load("config.yaml", "scaling.yaml"))
    run = study.scaling.runs()[0]
    assert study.scaling.minutes(study.scaling.run_config(run, "d")) is None  # the profile's


def test_a_family_the_config_leaves_out_is_none():
    config = load("ci.yaml")
    bare = copy.deepcopy(config)
    for key in ("ablation", "anchor_sweep", "lr_grid", "scaling", "stability", "finetune"):
        bare.pop(key, None)
    for build in (
        wtr.ablation, wtr.sweep, wtr.lr_grid, wsc.scaling, wsc.scaling_ablation, wst.stability,
        wst.stability_factors, wft.finetune, wft.finetune_base,
    ):  # fmt: skip
        assert build(bare) is None, build.__name__
    assert wtr.sweep({**config, "ablation": None}) is None  # the sweep retrains an ablation run
    assert wtr.pretrain(bare).runs() == wtr.pretrain(config).runs()
