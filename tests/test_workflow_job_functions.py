"""The functions Snakemake calls for each job (tapernorm.workflow.job_functions) and what every
output says about its run (tapernorm.workflow.stamps): each takes only what Snakemake passes by
name, and gives the job the directory, files, GPUs, cores, run config or stamp it needs."""

import dataclasses
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tapernorm.workflow import Plan, priorities, stamps, validate_pipeline_config
from tapernorm.workflow import files as wf
from tapernorm.workflow import job_functions as jf

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
# what Snakemake passes a params function by its parameters' names (an input or threads function:
# wildcards alone)
PARAMS_ARGS = {"wildcards", "input", "output", "threads", "resources"}


def load(name: str) -> dict:
    return validate_pipeline_config(yaml.safe_load((ROOT / "config" / name).read_text()), SCHEMA)


def arg_names(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_params_functions_take_only_what_snakemake_passes():
    made = [
        jf.input_dir("eval"),
        jf.output_dir("eval"),
        jf.optional_files("--bench", "bench"),
        jf.gpu_claim(lambda w: "cuda"),
        jf.run_dirs,
        jf.table_stem,
        stamps.stamp_param("--config-hash x"),
    ]
    for function in made:
        names = arg_names(function)
        assert names[0] == "wildcards" and set(names) <= PARAMS_ARGS, names
    train = jf.TrainJobs(Plan(load("ci.yaml")))
    wildcards_only = [
        jf.job_records_dir,
        jf.heldout_shards,
        jf.all_cores(SimpleNamespace(cores=1)),
        jf.lr_grid_input("."),
        jf.scaling_input,
        jf.gpu_input,
        train.run_config,
        train.gpus,
        train.device,
        train.minutes,
    ]
    for function in wildcards_only:
        assert arg_names(function) == ["wildcards"], function


def test_directories_of_a_jobs_inputs_and_outputs():
    wildcards = SimpleNamespace()
    run = SimpleNamespace(eval="results/runs/pretrain/x/eval.json")
    assert jf.input_dir("eval")(wildcards, run) == "results/runs/pretrain/x"
    assert jf.output_dir("eval")(wildcards, run) == "results/runs/pretrain/x"
    files = ["r/a/config.json", "r/a/eval.json", "r/b/eval.json", "r/a/metrics.jsonl"]
    assert jf.dirs_of(files) == "r/a r/b"  # in order, each once
    assert jf.run_dirs(wildcards, SimpleNamespace(runs=files)) == "r/a r/b"
    table = SimpleNamespace(csv="results/tables/table2.csv")
    assert jf.table_stem(wildcards, table) == "results/tables/table2"
    assert jf.job_records_dir(wildcards) == "results/job_records"


def test_optional_inputs_give_their_option_or_nothing():
    wildcards = SimpleNamespace()
    bench = jf.optional_files("--bench", "bench")
    assert bench(wildcards, SimpleNamespace(bench=["f.csv", "d.csv"])) == "--bench f.csv d.csv"
    assert bench(wildcards, SimpleNamespace(bench=[])) == ""
    sweep = jf.optional_files("--sweep-runs", "sweep", jf.dirs_of)
    assert sweep(wildcards, SimpleNamespace(sweep=["s/a/eval.json", "s/a/x"])) == "--sweep-runs s/a"


def test_a_job_claims_the_gpus_snakemake_granted_it():
    claim = jf.gpu_claim(lambda w: w.device, lambda w: w.ranks)
    on = SimpleNamespace(device="cuda", ranks=2)
    assert claim(on, SimpleNamespace(gpu=2)) == "tapernorm gpus --device cuda --ranks 2 2 --"
    assert claim(on, SimpleNamespace(gpu=0)) == ""
    cpu = SimpleNamespace(device="cpu", ranks=1)
    assert claim(cpu, SimpleNamespace(gpu=1)) == ""
    single = jf.gpu_claim(lambda w: "cuda")  # one rank unless told
    assert single(SimpleNamespace(), SimpleNamespace(gpu=1)) == "tapernorm gpus --device cuda 1 --"


def test_only_the_held_out_set_is_cut_from_the_fine_tuning_shards():
    heldout = jf.heldout_shards(SimpleNamespace(evalset="heldout"))
    assert heldout == f"--shards {wf.FINETUNE_DATA} " == "--shards data/finetune "
    assert jf.heldout_shards(SimpleNamespace(evalset="pile")) == ""


def test_all_cores_are_read_when_the_job_is_planned():
    workflow = SimpleNamespace(cores=None)  # -n and --unlock: no --cores
    threads = jf.all_cores(workflow)
    workflow.cores = 6
    assert threads(SimpleNamespace()) == 6


def test_committed_inputs_of_the_claims(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkout = tmp_path / "checkout"
    lr_grid = jf.lr_grid_input(str(checkout))
    assert lr_grid(None) == [] and jf.scaling_input(None) == [] and jf.gpu_input(None) == []
    for path in (checkout / wf.LR_GRID, tmp_path / wf.SCALING_SUMMARY):
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    gpu = tmp_path / wf.GPU_CHECKS / "h200-2026-12-04" / "env.json"
    gpu.parent.mkdir(parents=True)
    gpu.write_text("{}")
    assert lr_grid(None) == [str(checkout / wf.LR_GRID)]
    assert jf.scaling_input(None) == [wf.SCALING_SUMMARY]
    assert jf.gpu_input(None) == [f"{wf.GPU_CHECKS}/h200-2026-12-04/env.json"]


@pytest.mark.parametrize("family, run", [("pretrain", "dyt-d32-s1"), ("anchor_sweep", None)])
def test_a_train_job_is_its_familys_run(family, run):
    plan = Plan(load("ci.yaml"))
    run = run or plan.sweep.runs()[0]
    train = jf.TrainJobs(plan)
    wildcards = SimpleNamespace(family=family, run=run)
    resolved = train.run_config(wildcards)
    own = plan.family(family).run_config(run, "data/pretrain")
    # DyT trains from step 0; a sweep run branches from the ablation's trunk (workflow/trunks.py)
    trunk = None if family == "pretrain" else "ablation-d32-s0"
    assert resolved.init.trunk == (trunk and f"results/trunks/{trunk}")
    assert resolved.replace(init=own.init) == own
    inputs = train.trunk_input(wildcards)
    assert inputs.get("trunk_record") == (trunk and f"results/trunks/{trunk}/trunk.json")
    assert not trunk or inputs["trunk_tensors"] == f"results/trunks/{trunk}/ckpt/state.safetensors"
    assert resolved.name == f"{family}/{run}" and resolved.data.dir == "data/pretrain"
    assert (train.gpus(wildcards), train.device(wildcards)) == (0, "auto")
    assert train.minutes(wildcards) == 30  # ci.yaml has no step-time estimate
    with pytest.raises(ValueError, match="no family"):
        train.run_config(SimpleNamespace(family="finetune_base2", run=run))


def test_a_trunk_job_trains_its_first_runs_trunk():
    plan = Plan(load("ci.yaml"))
    train = jf.TrainJobs(plan)
    wildcards = SimpleNamespace(trunk="pretrain-d32-s1")
    cfg = train.trunk_config(wildcards)
    assert (cfg.name, cfg.init.trunk, cfg.data.dir) == (
        "pretrain/baseline-d32-s1",
        None,
        "data/pretrain",
    )
    assert (train.trunk_gpus(wildcards), train.trunk_device(wildcards)) == (0, "auto")
    with pytest.raises(ValueError, match="no trunk"):
        train.trunk_config(SimpleNamespace(trunk="pretrain-d32-s9"))


def test_a_paper_train_job_holds_a_gpu_for_its_estimated_time():
    train = jf.TrainJobs(Plan(load("paper.yaml")))
    wildcards = SimpleNamespace(family="pretrain", run="internal_aux-d512-s0")
    assert (train.gpus(wildcards), train.device(wildcards)) == (1, "cuda")
    assert train.minutes(wildcards) == 740  # 1.5 x 1M steps x 29 ms + 15 min


def test_longer_training_runs_start_first_and_below_the_jobs_others_wait_for():
    """Snakemake starts the ready jobs of the highest priority first: on the default, every
    pre-training run (600 steps of 16 x 128 tokens, 8 layers) before every ablation run (1,200 of
    8 x 128, 4 layers); the scaling study's longest runs first; all below the tiers above them."""
    p = priorities
    plan = Plan(load("config.yaml"))
    train = jf.TrainJobs(plan)

    def order(family: str) -> set[int]:
        runs = plan.family(family).runs()
        return {train.priority(SimpleNamespace(family=family, run=r)) for r in runs}

    pretrain, ablation, sweep = order("pretrain"), order("ablation"), order("anchor_sweep")
    assert min(pretrain) > max(ablation) and ablation == sweep
    tiers = [p.RECORD, p.PREPARE, p.BENCH, p.GATE, p.TRUNK, p.TRAINING_MAX]
    assert tiers == sorted(tiers, reverse=True) and max(pretrain) <= p.TRAINING_MAX
    # Snakemake starts the ready jobs whose priorities sum highest: on two cores, two jobs of a
    # lower tier (two trunks, a trunk and a training run) must not outweigh an all-core job
    assert 2 * p.TRUNK < p.BENCH < p.PREPARE and p.GATE + p.TRUNK < p.BENCH
    cfg = plan.pretrain.run_config(plan.pretrain.runs()[0], "")
    longer = cfg.replace(train=dataclasses.replace(cfg.train, steps=10 * cfg.train.steps))
    wider = cfg.replace(model=dataclasses.replace(cfg.model, n_embd=2 * cfg.model.n_embd))
    assert priorities.training(longer) > priorities.training(wider) > priorities.training(cfg)
    huge = longer.replace(train=dataclasses.replace(cfg.train, steps=10**30))
    assert priorities.training(huge) == priorities.TRAINING_MAX


def test_stamps_name_the_config_and_a_rehearsal():
    assert stamps.stamp_options("ab12", rehearsal=False) == "--config-hash ab12"
    assert stamps.stamp_options("ab12", rehearsal=True) == "--config-hash ab12 --rehearsal"
    stamp = stamps.stamp_param("--config-hash ab12")
    assert stamp(SimpleNamespace(), SimpleNamespace()) == "--config-hash ab12"
    assert arg_names(stamp) == ["wildcards", "output"]  # output: not a params rerun trigger


def test_the_rerun_command_names_the_config_files_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert stamps.rerun_command() == "snakemake --cores all"
    given = [str(tmp_path / "config/paper.yaml"), "config/rehearsal.yaml"]  # as Snakemake has them
    assert stamps.rerun_command(given) == (
        "snakemake --cores all --configfile config/paper.yaml config/rehearsal.yaml"
    )
