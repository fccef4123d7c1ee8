"""The workflow's config handling (library side, tapernorm.workflow): validation, run names, run
configs, the plan of a config (its families, targets, job records)."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tapernorm.cli import build_parser
from tapernorm.cli.data import data_settings
from tapernorm.config import ConfigError
from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow import finetune as wft
from tapernorm.workflow import names as wn
from tapernorm.workflow.outputs import NEEDS, OUTPUTS
from tapernorm.workflow.training import SWEEP, figure_width, sweep_base_run

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "ci.yaml", "paper.yaml"])
def test_shipped_configs_validate(name):
    cfg = validate_pipeline_config(load(name), SCHEMA)
    assert cfg["pretrain"]["log"]["every"] >= 1
    runs = Plan(cfg).pretrain.runs()
    assert len(runs) == len(set(runs))


def test_paper_config_plans_the_full_grid():
    cfg = validate_pipeline_config(load("paper.yaml"), SCHEMA)
    pretrain = Plan(cfg).pretrain
    runs = pretrain.runs()
    assert len(runs) == 8 * 4 * 6  # Table 1's six, DyT and its untied baseline, 4 widths, 6 seeds
    dyt = pretrain.run_config("dyt-d512-s0", "data/pretrain")
    assert dyt.model.norm == "dyt" and dyt.train.steps == 1_000_000
    rc = pretrain.run_config("internal_aux-d512-s5", "data/pretrain")
    assert rc.train.steps == 1_000_000 and rc.train.warmup_steps == 50_000
    assert rc.taper.start == 50_000 and rc.taper.end == 1_000_000
    assert rc.model.taper == "internal" and rc.anchor.enabled
    assert rc.model.n_head == 16 and rc.model.block_size == 512
    assert rc.train.batch_size == 16 and rc.train.lr == 3e-4
    assert pretrain.gpus(runs[0]) == 1  # a GPU job
    steps = {
        w: pretrain.run_config(f"baseline-d{w}-s0", "d").train.steps for w in (64, 128, 256, 512)
    }
    assert steps == {64: 500_000, 128: 500_000, 256: 750_000, 512: 1_000_000}


def test_run_names_roundtrip():
    assert wn.parse_run_name(wn.run_name("all_aux", 64, 3)) == ("all_aux", 64, 3)
    with pytest.raises(ValueError):
        wn.parse_run_name("all-aux-64")


def test_run_outside_the_family_is_refused():
    cfg = validate_pipeline_config(load("ci.yaml"), SCHEMA)
    with pytest.raises(ValueError, match="not part of"):
        Plan(cfg).pretrain.run_config("baseline-d32-s9", "d")


def _bad(mutate):
    cfg = load("ci.yaml")
    mutate(cfg)
    return cfg


@pytest.mark.parametrize(
    "mutate,key",
    [
        (
            lambda c: c["pretrain"].update(variants=["baseline", "half_taper"]),
            "pretrain.variants.1",
        ),
        (lambda c: c["pretrain"].update(widths=[31]), "pretrain.widths"),
        (lambda c: c["pretrain"].update(seeds=-2), "pretrain.seeds"),
        (lambda c: c["data"].update(corpus="wikipedia"), "data.corpus"),
        (lambda c: c["pretrain"]["train"].update(lr="fast"), "pretrain.train.lr"),
        (lambda c: c["pretrain"].update(steps={"64": 10}), "pretrain.steps"),
        (
            lambda c: (
                c["fold"].update(variants=["internal"])
                or c["pretrain"].update(variants=["baseline"])
            ),
            "fold.variants",
        ),
        (lambda c: c["pretrain"]["model"].update(n_heads=4), "pretrain.model"),
    ],
)
def test_invalid_pipeline_configs_name_the_key(mutate, key):
    with pytest.raises(ConfigError, match=f"config key {key}"):
        validate_pipeline_config(_bad(mutate), SCHEMA)


def prepare_data_settings(data: dict) -> dict:
    """What `tapernorm prepare-data` reads from a `data:` section as rule prepare_data passes it
    (--config-json)."""
    argv = ["prepare-data", "--config-json", json.dumps(data), "--out", "o"]
    return data_settings(build_parser().parse_args(argv))


def test_prepare_data_settings():
    cfg = validate_pipeline_config(load("config.yaml"), SCHEMA)
    settings = prepare_data_settings(cfg["data"])
    assert {k: settings[k] for k in ("corpus", "tokenizer", "vocab_size", "byte_fallback")} == {
        "corpus": "shakespeare",
        "tokenizer": "sentencepiece",
        "vocab_size": 512,
        "byte_fallback": False,
    }
    paper = validate_pipeline_config(load("paper.yaml"), SCHEMA)
    assert prepare_data_settings(paper["data"])["tokenizer_chars"] == 200_000_000


def test_taper_start_and_end_fractions():
    cfg = load("ci.yaml")
    cfg["pretrain"]["taper"].update(start_frac=0.25, end_frac=0.5)
    cfg = validate_pipeline_config(cfg, SCHEMA)
    rc = Plan(cfg).pretrain.run_config("all_aux-d32-s0", "d")
    steps = rc.train.steps
    assert rc.taper.start == round(0.25 * steps) and rc.taper.end == round(0.5 * steps)
    paper = validate_pipeline_config(load("paper.yaml"), SCHEMA)  # the paper: end of warmup
    rc = Plan(paper).pretrain.run_config("all_aux-d64-s0", "d")
    assert rc.taper.start == rc.train.warmup_steps == 25_000
    bad = load("ci.yaml")
    bad["pretrain"]["taper"].update(start_frac=0.5, end_frac=0.5)
    with pytest.raises(ConfigError, match="taper.start"):
        validate_pipeline_config(bad, SCHEMA)
    bad["pretrain"]["taper"].update(start_frac=1.5)
    with pytest.raises(ConfigError, match="config key pretrain.taper.start_frac"):
        validate_pipeline_config(bad, SCHEMA)


def test_anchor_sweep_runs_retrain_the_ablations_all_aux_at_other_weights():
    cfg = load("ci.yaml")
    cfg["ablation"]["anchor"] = {"lam": 10.0, "form": "eq5"}
    cfg["anchor_sweep"] = {"eq5": [0.1, 10], "relative": [0.1]}
    cfg = validate_pipeline_config(cfg, SCHEMA)
    plan = Plan(cfg)
    names = plan.sweep.runs()
    assert names == ["eq5-lam0.1", "relative-lam0.1"]  # eq5 at 10 is the ablation's own run
    base = plan.ablation.run_config(sweep_base_run(cfg), "d")
    rc = plan.family(SWEEP).run_config("relative-lam0.1", "d")
    assert rc.anchor == dataclasses.replace(base.anchor, form="relative", lam=0.1)
    assert rc.name == "anchor_sweep/relative-lam0.1" and rc.variant == "all_aux"
    assert rc == base.replace(anchor=rc.anchor, name=rc.name)
    with pytest.raises(ValueError, match="not part of"):
        plan.sweep.run_config("eq5-lam10", "d")
    bad = load("ci.yaml")
    bad["anchor_sweep"] = {"eq5": [1.0]}
    bad["ablation"]["variants"] = ["final", "all"]
    with pytest.raises(ConfigError, match="anchor_sweep"):
        validate_pipeline_config(bad, SCHEMA)
    bad = load("ci.yaml")
    bad["anchor_sweep"] = {"eq5": [1.0], "log": [1.0]}
    with pytest.raises(ConfigError, match="anchor_sweep"):
        validate_pipeline_config(bad, SCHEMA)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (  # an unknown key: its full name and the keys allowed there
            lambda c: c["ablation"].update(widht=[64]),
            "config key ablation.widht: unknown key; allowed: variants, widths, seeds,",
        ),
        (
            lambda c: c["ablation"]["train"].update(lrate=1.0),
            "config key ablation.train.lrate: unknown key; allowed: batch_size, grad_accum, lr,",
        ),
        (  # a bad enum value: the values allowed
            lambda c: c["ablation"]["model"].update(style="bert"),
            "config key ablation.model.style: 'bert' is not one of ['llama', 'gpt2']",
        ),
        (  # a number out of bounds: the bound
            lambda c: c["ablation"]["train"].update(warmup_frac=2),
            "config key ablation.train.warmup_frac: 2 is greater than the maximum of 1",
        ),
        (
            lambda c: c["ablation"].update(steps=0),
            "config key ablation.steps: 0 is less than the minimum of 1",
        ),
        (
            lambda c: c["pretrain"].update(steps={"64": 0}),
            "config key pretrain.steps.64: 0 is less than the minimum of 1",
        ),
        (
            lambda c: c["pretrain"].update(steps={"d64": 5}),
            "config key pretrain.steps.d64: unknown key; keys must match ^[0-9]+$",
        ),
        (lambda c: c.update(ablation=3), "config key ablation: 3 is not of type 'object', 'null'"),
    ],
)
def test_workflow_config_errors_name_the_leaf_key_and_what_is_allowed(mutate, message):
    with pytest.raises(ConfigError) as e:
        validate_pipeline_config(_bad(mutate), SCHEMA)
    assert str(e.value).startswith(message)


def test_ablation_may_be_null():
    cfg = validate_pipeline_config(
        _bad(lambda c: c.update(ablation=None, anchor_sweep=None)), SCHEMA
    )
    assert cfg["ablation"] is None


def test_benchmarks_time_random_weights_at_the_paper_size_or_the_trained_runs():
    default = validate_pipeline_config(load("config.yaml"), SCHEMA)
    assert default["bench"]["random"] == "d512"
    bench = Plan(default).bench
    assert bench.inputs() == {}  # no training run to wait for
    # the benchmark jobs' models: none named (--config-json carries random: d512)
    assert bench.model_options() == ""
    assert all(bench.job_config(kind)["random"] == "d512" for kind in ("forward", "decode"))
    ci = validate_pipeline_config(load("ci.yaml"), SCHEMA)
    assert ci["bench"]["random"] is None
    assert Plan(ci).bench.model_options() == (
        "--baseline results/runs/pretrain/baseline-d32-s0 "
        "--tapered results/runs/pretrain/internal_aux-d32-s0 --dyt results/runs/pretrain/dyt-d32-s0 "
    )
    assert Plan(ci).bench.inputs()["verify"] == "results/fold/internal_aux-d32-s0/verify.json"
    bad = {**load("config.yaml"), "bench": {**load("config.yaml")["bench"], "random": "512"}}
    with pytest.raises(ConfigError, match="bench.random"):
        validate_pipeline_config(bad, SCHEMA)


def test_wildcard_constraints_are_the_run_name_patterns():
    import re

    cfg = validate_pipeline_config(load("paper.yaml"), SCHEMA)

    def matches(pattern: str, name: str) -> bool:
        return re.fullmatch(pattern, name) is not None

    plan = Plan(cfg)
    runs = plan.pretrain.runs() + plan.ablation.runs() + plan.sweep.runs()
    assert runs and all(matches(wn.RUN_WILDCARD, n) for n in runs)
    assert wn.wildcard_pattern(wn.RUN_NAME) == r"(?:[a-z_]+)-d(?:\d+)-s(?:\d+)"
    for name in ("baseline-d64", "baseline-d64-s0/eval", "eq5-lamx", "Baseline-d64-s0"):
        assert not matches(wn.RUN_WILDCARD, name), name
    ft = plan.finetune.runs()
    assert ft and all(matches(wn.FINETUNE_RUN_WILDCARD, n) for n in ft)
    folded = [n for n in ft if matches(wn.FOLDED_FINETUNE_RUN_WILDCARD, n)]
    assert folded == wft.runs_of(plan.finetune, ["all_taperln"])
    models = wft.models(plan.finetune.section)
    assert all(matches(wn.FINETUNE_MODEL_WILDCARD, m) for m in models)
    assert not matches(wn.FINETUNE_MODEL_WILDCARD, "GPT 2")


def test_all_targets_follow_the_configured_families():
    ci = validate_pipeline_config(load("ci.yaml"), SCHEMA)
    targets = Plan(ci).all_targets()
    assert len(targets) == len(set(targets))
    for path in (
        "figures/fig7_anchor_sweep.png",
        "figures/fig5_decode_speedup.pdf",
        "results/tables/table2.html",
        "results/tables/table_anchor.csv",
        "results/tables/table6.tex",
        "results/tables/table_decode.md",
        "results/export/all_taperln-gpt2-d16/verify.json",
        "results/claims.html",
        "results/tables/job_times.csv",
        "results/tables/table_tails.html",
        "results/tables/table_tails.json",  # the record that fig_tails draws
    ):
        assert path in targets, path
    assert {t.split("/")[-1].split(".")[0] for t in targets if t.startswith("figures/")} == {
        *Plan(ci).figures(),
        "fig5_decode_speedup",
        "fig_claim_gaps",  # the claims' paired gaps, from claims.json
        "fig_tails",  # the tails battery side by side, from table_tails.json
    }
    with_grid = Plan(ci).all_targets(lr_grid=True)  # the checkout has the committed LR grid
    grid = {"figures/fig_lr_grid.pdf", "figures/fig_lr_grid.png", "figures/fig_lr_grid.set.json"}
    assert set(with_grid) - set(targets) == grid
    # each table's, figure's and the claims' output-set marker: a write that stopped is rerun
    names = {t.removesuffix(".set.json") for t in targets if t.endswith(".set.json")}
    tables = {t.rsplit(".", 1)[0] for t in targets if t.endswith(".csv")}
    figures = {t.rsplit(".", 1)[0] for t in targets if t.endswith(".pdf")}
    assert names == tables | figures | {"results/claims"}
    bare = validate_pipeline_config(
        _bad(lambda c: c.update(ablation=None, anchor_sweep=None, finetune=None, bench=None)),
        SCHEMA,
    )
    names = {t.split("/")[-1] for t in Plan(bare).all_targets()}
    assert "fig4b_ablation_grad_norms.pdf" not in names and "table_anchor.csv" not in names
    assert not {"table4.csv", "table3.csv", "fig5_decode_speedup.pdf"} & names
    assert {"table1.csv", "table5.html", "claims.md", "job_times.md"} <= names
    assert {"table_tails.csv", "table_tails.json", "fig_tails.png"} <= names  # always drawn
    assert [f.name for f in Plan(bare).training()] == ["pretrain"]
    assert Plan(bare).bench_csvs() == []


def test_the_plan_makes_the_registrys_outputs_whose_needs_the_config_has():
    ci = Plan(validate_pipeline_config(load("ci.yaml"), SCHEMA))
    assert {o.needs for o in OUTPUTS} <= set(NEEDS)
    assert [o.name for o in ci.outputs(lr_grid=True)] == [o.name for o in OUTPUTS]
    assert "fig_lr_grid" not in {o.name for o in ci.outputs()}  # no committed grid: not drawn
    assert ci.tables_of("") == ["table1", "table2", "table5"]  # report.smk's rule per table
    assert ci.tables_of("finetune") == ["table4", "table6"]  # finetune.smk's
    assert ci.figures() == [
        "fig1_gate_schedule", "fig2_train_loss", "fig3_logit_norm", "fig4_grad_norms",
        "fig4b_ablation_grad_norms", "fig6_scale_anchor", "fig7_anchor_sweep",
    ]  # fmt: skip
    no_sweep = Plan(validate_pipeline_config(_bad(lambda c: c.update(anchor_sweep=None)), SCHEMA))
    made = {o.name for o in no_sweep.outputs()}
    assert {"fig4b_ablation_grad_norms", "fig6_scale_anchor"} <= made
    assert not {"fig7_anchor_sweep", "table_anchor"} & made
    assert no_sweep.figure_width("fig6_scale_anchor") == figure_width(no_sweep.ablation.section)


def test_job_records_are_one_path_per_timed_job():
    assert wn.job_record("train", "{family}", "{run}") == (
        "results/job_records/train/{family}/{run}.tsv"
    )
    assert wn.job_record("bench_forward", root=None) == "bench_forward.tsv"
    plan = Plan(validate_pipeline_config(load("ci.yaml"), SCHEMA))
    records, names = plan.timed_jobs(), plan.timed_jobs(root=None)
    assert records == [f"{wn.JOB_RECORDS}/{n}" for n in names]
    assert "train/pretrain/internal_aux-d32-s1.tsv" in names
    assert f"train/{SWEEP}/{plan.sweep.runs()[0]}.tsv" in names
    assert "finetune/all_taperln-gpt2-d16.tsv" in names
    assert names[-3:] == ["tails.tsv", "bench_forward.tsv", "bench_decode.tsv"]
    trained = len(plan.pretrain.runs()) + len(plan.ablation.runs())
    ft = len(plan.finetune.runs()) + len(wft.base_models(plan.finetune.section))
    trunks = [f"trunk/{name}.tsv" for name in plan.trunks.names()]
    assert trunks and set(trunks) <= set(names)
    assert len(names) == len(trunks) + trained + len(plan.sweep.runs()) + ft + 3


def test_tails_settings_default_without_changing_the_configs_hash():
    """The default config has no `tails` section (its validated hash, which the committed studies'
    manifests name, stays as it was): the battery takes TAILS_SETTINGS; a config's own win."""
    from conftest import config_files

    from tapernorm.workflow.plan import TAILS_SETTINGS

    schema = str(Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml")
    default = validate_pipeline_config(config_files("config.yaml"), schema)
    assert "tails" not in default
    assert Plan(default).tails_settings() == TAILS_SETTINGS
    ci = validate_pipeline_config(config_files("ci.yaml"), schema)
    assert Plan(ci).tails_settings() == {
        "windows": 16, "search_budget": 64, "dtypes": ["float32", "bfloat16"]
    }  # fmt: skip
    assert TAILS_SETTINGS["dtypes"] == ["float32"]  # the default's: no emulated bfloat16 pass
    paper = validate_pipeline_config(config_files("paper.yaml"), schema)
    assert Plan(paper).tails_settings()["dtypes"] == ["float32", "bfloat16"]
    for bad in ([], ["float16"], ["float32", "float32"]):
        with pytest.raises(ConfigError, match="tails"):
            validate_pipeline_config({**config_files("ci.yaml"), "tails": {"dtypes": bad}}, schema)
