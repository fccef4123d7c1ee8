"""A family of runs of the workflow: its rows (each run's name and the recipe of its config), the
rule that trains them, the device of its jobs, where each run lives and what it writes. One
function per family builds it from the config (training.pretrain, .ablation, .sweep, .lr_grid;
scaling.scaling, .scaling_ablation; stability.stability, .stability_factors; finetune.finetune,
.finetune_base); what only one family has is a function of its module. workflow.plan.Plan holds
them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..config import resolve_run_config
from ..config.run import RunConfig
from .devices import job_gpus
from .names import JOB_RECORDS, job_record, run_dir

Recipe = Callable[[str], dict]  # the data's directory -> the run config to resolve


@dataclass(frozen=True, eq=False)
class Family:
    """The runs of one family, trained by rule `rule` into results/runs/<name>/<run>/: `recipes`
    {run: recipe}, in run order; `section` the config section it is built from; `device` its jobs'
    configured device (auto is resolved where each job runs), config key `device_key` (device_of);
    `timed_by` the section whose `gpu_step_ms` sizes a job's minutes on a cluster (None: the
    profile's default); `gpus_of` a run's GPUs where they differ by run (the fine-tuning's models);
    `rule_wildcards` the wildcards of the rule's jobs (and so of their job records)."""

    name: str
    section: dict
    recipes: dict[str, Recipe]
    device: str
    device_key: str
    rule: str = "train"
    timed_by: dict | None = None
    gpus_of: Callable[[str], int] | None = None
    rule_wildcards: tuple[str, ...] = ("family", "run")

    def runs(self) -> list[str]:
        return list(self.recipes)

    def spec(self, run: str, data_dir: str) -> dict:
        """The run config (to resolve) of `run` (ValueError for a run not here)."""
        recipe = self.recipes.get(run)
        if recipe is None:
            raise ValueError(f"run {run} is not part of the {self.name} family in this config")
        return recipe(data_dir)

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        """The resolved `tapernorm train` config of run `run` (ValueError for a run not here)."""
        return resolve_run_config(self.spec(run, data_dir))

    def gpus(self, run: str) -> int:
        """GPUs a training job of `run` holds (workflow.devices.job_gpus)."""
        if self.gpus_of is not None:
            return self.gpus_of(run)
        return job_gpus(self.device, None, self.device_key)

    def minutes(self, cfg: RunConfig) -> int | None:
        """Minutes a training job of run config `cfg` asks a cluster for (None: the profile's
        default): step_minutes of `timed_by`."""
        return None if self.timed_by is None else step_minutes(self.timed_by, cfg)

    def run_dir(self, run: str) -> str:
        return run_dir(self.name, run)

    def run_dirs(self, runs: list[str] | None = None) -> list[str]:
        return [self.run_dir(r) for r in (self.runs() if runs is None else runs)]

    def evals(self, runs: list[str] | None = None) -> list[str]:
        """eval.json of each run (all, or `runs`): a training job's last output."""
        return [f"{d}/eval.json" for d in self.run_dirs(runs)]

    def job_records(self, root: str | None = JOB_RECORDS) -> list[str]:
        """The job records (Snakemake's benchmark: files) of the family's training jobs, named
        by the rule's wildcards."""
        values = [{"family": self.name, "run": r} for r in self.runs()]
        return [
            job_record(self.rule, *(v[w] for w in self.rule_wildcards), root=root) for v in values
        ]


def device_of(config: dict, section: str) -> dict[str, str]:
    """Family's `device` and `device_key` for jobs trained as config section `section` (dotted:
    "finetune.pretrain"): its train.device."""
    sec = config
    for key in section.split("."):
        sec = sec[key]
    return {"device": sec["train"]["device"], "device_key": f"{section}.train.device"}


def step_minutes(section: dict, cfg: RunConfig, default: int = 30) -> int:
    """1.5x the run's steps at the section's `gpu_step_ms` for its width, plus 15 minutes of set-up
    and evaluation; `default` without an estimate."""
    estimates, width = section.get("gpu_step_ms") or {}, cfg.model.n_embd
    step_ms = estimates.get(width, estimates.get(str(width)))
    if step_ms is None:
        return default
    return math.ceil(1.5 * cfg.train.steps * step_ms / 60_000) + 15


def family_dirs(family: Family | None) -> list[str]:
    """The run directories of an optional family: none when the config leaves it out (None)."""
    return family.run_dirs() if family else []
