"""The functions that Snakemake calls for each job of a rule (its params, resources, threads and
input functions). Snakemake passes each what its parameters name (wildcards, input, output,
resources), so those names are Snakemake's; the factories here (input_dir, gpu_claim, ...) make
one for a given key or value. rule train's are TrainJobs'."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..config.run import RunConfig
from .devices import gpu_prefix
from .files import (
    FINETUNE_DATA,
    committed_bench_pool,
    committed_gpu_check,
    committed_lr_grid,
    committed_scaling_summary,
    committed_stability_summary,
)
from .names import JOB_RECORDS
from .plan import Plan
from .sheet import RunRow, runs_sheet
from .trunks import trunk_files

# what Snakemake passes a job function: the job's wildcards, input, output or resources, each a
# Namedlist (its entries also attributes by name); typed loosely, planning imports no Snakemake
Namedlist = Any
JobFunction = Callable[..., Any]


def input_dir(key: str) -> JobFunction:
    """A params function: the directory of the job's input `key` (a run, a data set)."""

    def param(wildcards: Namedlist, input: Namedlist) -> str:
        return os.path.dirname(getattr(input, key))

    return param


def output_dir(key: str) -> JobFunction:
    """A params function: the directory of the job's output `key` (where its command writes)."""

    def param(wildcards: Namedlist, output: Namedlist) -> str:
        return os.path.dirname(getattr(output, key))

    return param


def dirs_of(paths: Sequence[str]) -> str:
    """Run directories of a list of files inside them, in order, each once (for --runs)."""
    return " ".join(dict.fromkeys(p.rsplit("/", 1)[0] for p in paths))


def run_dirs(wildcards: Namedlist, input: Namedlist) -> str:
    """--runs: the run directories of the job's input `runs`."""
    return dirs_of(input.runs)


def table_stem(wildcards: Namedlist, output: Namedlist) -> str:
    """--out of a table command: its outputs' path without the extension."""
    return output.csv.removesuffix(".csv")


def optional_files(
    option: str, key: str, join: Callable[[Sequence[str]], str] = " ".join
) -> JobFunction:
    """A params function: `option FILES` of the job's input `key` (FILES: join(files)), or ""
    when that input is empty (the claims' optional families)."""

    def param(wildcards: Namedlist, input: Namedlist) -> str:
        files = getattr(input, key)
        return f"{option} {join(files)}" if files else ""

    return param


def one_rank(wildcards: Namedlist) -> int:
    return 1


def gpu_claim(
    device: Callable[[Namedlist], str], ranks: Callable[[Namedlist], int] = one_rank
) -> JobFunction:
    """A params function: the `tapernorm gpus` prefix that gives the job the GPUs it holds
    (resources.gpu, as Snakemake granted it) on a workstation, for a command on device(wildcards)
    of ranks(wildcards) processes; "" for a job that holds none."""

    def param(wildcards: Namedlist, resources: Namedlist) -> str:
        return gpu_prefix(resources.gpu, device(wildcards), ranks(wildcards))

    return param


def all_cores(workflow: Any) -> JobFunction:
    """A threads function: every core Snakemake was given (`workflow.cores`, read when the job is
    planned: --unlock and -n need no --cores), for a benchmark or a data preparation."""

    def threads(wildcards: Namedlist) -> int:
        return workflow.cores

    return threads


def job_records_dir(wildcards: Namedlist) -> str:
    """The directory of the job records that `tapernorm job-times` reads (its inputs)."""
    return JOB_RECORDS


def heldout_shards(wildcards: Namedlist) -> str:
    """--shards of evaluation set wildcards.evalset, with its trailing space: the fine-tuning
    shards that the held-out set is cut from; "" for a set from the hub."""
    return f"--shards {FINETUNE_DATA} " if wildcards.evalset == "heldout" else ""


def lr_grid_input(checkout: str) -> JobFunction:
    """An input function: the committed LR grid where there is one (files.committed_lr_grid; the
    claims judge by it only at its scale), else nothing."""

    def files(wildcards: Namedlist) -> list[str]:
        return committed_lr_grid(checkout)

    return files


def scaling_input(wildcards: Namedlist) -> list[str]:
    """The committed scaling study's summary, where the checkout has it (claims 1-4, DyT's row)."""
    return committed_scaling_summary()


def stability_input(wildcards: Namedlist) -> list[str]:
    """The committed stability study's summary, where the checkout has it (the stability row)."""
    return committed_stability_summary()


def bench_pool_input(wildcards: Namedlist) -> list[str]:
    """The committed reference runs' benchmark CSVs (claim 7 and DyT's speed rule pools them)."""
    return committed_bench_pool()


def gpu_input(wildcards: Namedlist) -> list[str]:
    """The newest committed first-GPU check's env.json, where the checkout has one (claim 7)."""
    return committed_gpu_check()


class TrainJobs:
    """The job functions of rule train and rule trunk: each reads its run's row of the runs' sheet
    (workflow.sheet, built here once: `tapernorm runs-sheet` prints it)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rows = {(r.family, r.run): r for r in runs_sheet(plan)}

    def column(self, name: str) -> list:
        """One column of the sheet (a field of RunRow), in row order: what rule runs expands."""
        return [getattr(r, name) for r in self.rows.values()]

    def row(self, wildcards: Namedlist) -> RunRow:
        """The sheet's row of the job's run (wildcards.family, wildcards.run)."""
        key = (wildcards.family, wildcards.run)
        if key not in self.rows:
            family = self.plan.family(wildcards.family).name  # (ValueError: no such family)
            raise ValueError(
                f"run {wildcards.run} is not part of the {family} family in this config"
            )
        return self.rows[key]

    def run_config(self, wildcards: Namedlist) -> RunConfig:
        """The run's resolved config (what `tapernorm train --config-json` takes), branching from
        its trunk where it has one."""
        return self.row(wildcards).config

    def trunk_input(self, wildcards: Namedlist) -> dict[str, str]:
        """The files of the trunk a run branches from (trunks.trunk_files, keys prefixed
        `trunk_`), else {}."""
        name = self.plan.trunks.of(wildcards.family, wildcards.run)
        return {f"trunk_{k}": v for k, v in trunk_files(name).items()} if name else {}

    def trunk_row(self, wildcards: Namedlist) -> RunRow:
        """The row of trunk wildcards.trunk's first run."""
        return self.rows[self.plan.trunks.first_run(wildcards.trunk)]

    def trunk_config(self, wildcards: Namedlist) -> RunConfig:
        """What `tapernorm train --trunk` takes for trunk wildcards.trunk: its first run's config
        before it branches (Plan.run_configs'; the row's branches from the trunk)."""
        return self.plan.run_configs[self.plan.trunks.first_run(wildcards.trunk)]

    def trunk_gpus(self, wildcards: Namedlist) -> int:
        return self.trunk_row(wildcards).gpus

    def trunk_device(self, wildcards: Namedlist) -> str:
        return self.trunk_row(wildcards).device

    def gpus(self, wildcards: Namedlist) -> int:
        return self.row(wildcards).gpus

    def device(self, wildcards: Namedlist) -> str:
        return self.row(wildcards).device

    def priority(self, wildcards: Namedlist) -> int:
        """Longer runs first (priorities.training)."""
        return self.row(wildcards).priority

    def minutes(self, wildcards: Namedlist) -> int | None:
        """The runtime a cluster is asked for (None: the profile's default)."""
        return self.row(wildcards).minutes
