"""A family of runs of the workflow: its run names, each run's config (what `tapernorm train
--config-json` takes), the device and resources of its jobs, where each run lives, what it writes.
Each family of the config is one object (workflow.plan.Plan holds them); none knows another's
special cases."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .names import JOB_RECORDS, job_record, run_dir

if TYPE_CHECKING:
    from ..config.run import RunConfig


class Family:
    """The runs of one family, trained by rule `rule` into results/runs/<name>/<run>/."""

    name: str = ""
    rule: str = "train"

    def __init__(self, config: dict) -> None:
        self.config = config

    def runs(self) -> list[str]:
        raise NotImplementedError

    def run_config(self, run: str, data_dir: str) -> RunConfig:
        """The resolved `tapernorm train` config of run `run` (ValueError for a run not here)."""
        raise NotImplementedError

    @property
    def device(self) -> str:
        """The configured device of the family's runs (auto is resolved where each job runs)."""
        raise NotImplementedError

    def gpus(self, run: str) -> int:
        """GPUs a training job of `run` holds (workflow.devices.job_gpus)."""
        raise NotImplementedError

    def ranks(self, run: str) -> int:
        """Processes of a training job of `run`."""
        return 1

    def launcher(self, run: str) -> str:
        """`tapernorm`, or for a run of several ranks torchrun starting one process per rank."""
        n = self.ranks(run)
        if n == 1:
            return "tapernorm"
        return f"torchrun --standalone --nproc_per_node {n} -m tapernorm.cli"

    def runtime(self, run: str, cfg: RunConfig | None = None) -> int | None:
        """Minutes a training job of `run` asks a cluster for (None: the profile's default);
        `cfg`: the run's config where it is resolved already."""
        return None

    def mem_mb(self, run: str) -> int | None:
        """Host memory of a training job of `run` (None: the profile's default)."""
        return None

    def run_dir(self, run: str) -> str:
        return run_dir(self.name, run)

    def run_dirs(self, runs: list[str] | None = None) -> list[str]:
        return [self.run_dir(r) for r in (self.runs() if runs is None else runs)]

    def evals(self, runs: list[str] | None = None) -> list[str]:
        """eval.json of each run (all, or `runs`): a training job's last output."""
        return [f"{d}/eval.json" for d in self.run_dirs(runs)]

    def job_records(self, root: str | None = JOB_RECORDS) -> list[str]:
        """The job records (Snakemake's benchmark: files) of the family's training jobs."""
        return [job_record(self.rule, *self.record_wildcards(r), root=root) for r in self.runs()]

    def record_wildcards(self, run: str) -> tuple[str, ...]:
        return (self.name, run)


def family_dirs(family: Family | None) -> list[str]:
    """The run directories of an optional family: none when the config leaves it out (None)."""
    return family.run_dirs() if family else []
