"""What a job's params hold follows what the job reads: a change under `bench:` leaves every
training job's config as it was (and one benchmark's grid leaves the other benchmark's job config),
and a change under `pretrain.train` changes the pre-training runs' configs only. Snakemake reruns a
finished job whose params changed (its params rerun trigger); the end-to-end check, `snakemake -n`
on a finished CI run, is in test_workflow.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from tapernorm.workflow import Plan, validate_pipeline_config
from tapernorm.workflow.bench import BENCH_KINDS

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")


def ci_config() -> dict:
    return yaml.safe_load((ROOT / "config/ci.yaml").read_text())


def train_params(raw: dict) -> dict[str, str]:
    """{family/run: the params value rule train (or a fine-tuning rule) passes} of a raw config."""
    plan = Plan(validate_pipeline_config(copy.deepcopy(raw), SCHEMA))
    return {
        f"{fam.name}/{run}": fam.run_config(run, "data").to_json()
        for fam in plan.families()
        for run in fam.runs()
    }


def bench_params(raw: dict) -> dict[str, str]:
    plan = Plan(validate_pipeline_config(copy.deepcopy(raw), SCHEMA))
    return {kind: json.dumps(plan.bench.job_config(kind)) for kind in BENCH_KINDS}


def test_a_bench_change_leaves_every_training_job_as_it_was():
    raw = ci_config()
    changed = copy.deepcopy(raw)
    changed["bench"]["forward"]["repeats"] += 1
    changed["bench"]["decode"]["modes"] = ["eager", "compiled"]
    changed["bench"]["dtype"] = "bfloat16"
    before, after = train_params(raw), train_params(changed)
    families = {run.split("/")[0] for run in before}
    assert families == {"pretrain", "ablation", "anchor_sweep", "finetune_base", "finetune"}
    assert after == before


def test_one_benchmarks_grid_leaves_the_other_benchmarks_job():
    raw = ci_config()
    forward = copy.deepcopy(raw)
    forward["bench"]["forward"]["repeats"] += 1
    before, after = bench_params(raw), bench_params(forward)
    assert after["decode"] == before["decode"] and after["forward"] != before["forward"]
    shared = copy.deepcopy(raw)
    shared["bench"]["dtype"] = "bfloat16"  # read by both
    assert all(bench_params(shared)[k] != before[k] for k in BENCH_KINDS)
    assert "decode" not in json.loads(before["forward"]) and "forward" in json.loads(
        before["forward"]
    )


def test_a_pretrain_train_change_changes_the_pretraining_runs_only():
    raw = ci_config()
    changed = copy.deepcopy(raw)
    changed["pretrain"]["train"]["lr"] = 2.0e-3
    before, after = train_params(raw), train_params(changed)
    moved = {run for run in before if before[run] != after[run]}
    assert moved == {run for run in before if run.startswith("pretrain/")}
    assert len(moved) == 16  # 8 variants, 1 width, 2 seeds
