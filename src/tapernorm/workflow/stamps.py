"""What the workflow's outputs say about the run that made them: the stamp options of every table,
figure, the claims and job times (and the params function that passes them without making them a
rerun trigger), and the command that reruns the run (the report's home page, the LR grid's and
the scaling study's summaries name it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any


def stamp_options(config_hash: str, rehearsal: bool) -> str:
    """The stamp options of a table, figure, the claims or job times: the validated config's
    sha256, and --rehearsal for a rehearsal (each of its outputs says so)."""
    return f"--config-hash {config_hash}" + (" --rehearsal" if rehearsal else "")


def stamp_param(stamp: str) -> Callable[[Any, Any], str]:
    """A params function that gives a job `stamp` (stamp_options). A function of the job's output,
    which Snakemake counts as derived and leaves out of its params rerun trigger: the stamp names
    the config an output was made under, and a change to a part of the config that it does not
    read (bench: for Table 1) must not rebuild it. What it reads are its inputs (runs, benchmarks,
    data), rebuilt when the params of their jobs (a training run's config) change."""

    def param(wildcards: Any, output: Any) -> str:
        return stamp

    return param


def rerun_command(configfiles: Sequence[str] = ()) -> str:
    """The command that reruns this run: `snakemake --cores all`, with the config files given on
    its command line (`configfiles`, none for the default config) relative to the working
    directory."""
    given = f" --configfile {' '.join(os.path.relpath(f) for f in configfiles)}"
    return "snakemake --cores all" + (given if configfiles else "")
