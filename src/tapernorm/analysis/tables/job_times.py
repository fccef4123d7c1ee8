"""Measured job times: the wall time of each pipeline job from Snakemake's job records
(`benchmark:` files, results/job_records/<rule>/<wildcards>.tsv), summed per rule and family (the
directories between the rule and the record, e.g. train/pretrain). The README and config/README.md
quote job times from this table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ...runtime import bookkeeping
from .training import write_table

COLUMNS = ["Rule", "Family", "Jobs", "Total s", "Max s", "Slowest job"]


def read_record(path: str | Path) -> float:
    """Seconds of one job record (the mean over its rows, if the job was repeated)."""
    kind = bookkeeping.JOB_RECORD
    rows = bookkeeping.read_tsv(kind, path)
    seconds = sum(row["s"] for row in rows) / len(rows)
    if not math.isfinite(seconds) or seconds < 0:
        raise bookkeeping.fail(
            kind, path, f"has no valid s: its time {seconds} s is not a finite number of seconds"
        )
    return seconds


def load_job_times(
    root: str | Path, jobs: Sequence[str | Path] | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """(one row per record: rule, family, job, seconds; the expected records not found).

    `jobs`: the records to read, relative to `root` (default: every .tsv under it); those absent
    are returned, not an error (their jobs ran before records were kept, or have not run)."""
    root = Path(root)
    if jobs is None:
        if not root.is_dir():
            raise FileNotFoundError(f"job records directory {root} does not exist")
        paths = sorted(p.relative_to(root) for p in root.rglob("*.tsv"))
    else:
        paths = [Path(p) for p in jobs]
        paths = [p.relative_to(root) if p.is_relative_to(root) else p for p in paths]
    rows, missing = [], []
    for rel in paths:
        if not (root / rel).is_file():
            missing.append(str(rel))
            continue
        parts = rel.with_suffix("").parts
        rule, family = parts[0], "/".join(parts[1:-1])
        job = parts[-1] if len(parts) > 1 else ""
        rows.append((rule, family, job, read_record(root / rel)))
    return pd.DataFrame(rows, columns=["rule", "family", "job", "seconds"]), missing


def require_records(records: pd.DataFrame, missing: Sequence[str], root: str | Path) -> None:
    """ValueError if no record was found: a table of no jobs (every one given absent, or none
    under `root`) would read as a pipeline that took no time."""
    if len(records):
        return
    if missing:
        found = (
            f"none of the {len(missing)} records --jobs names is under {root} (e.g. {missing[0]})"
        )
    else:
        found = f"no job records (.tsv) under {root}"
    raise ValueError(
        f"{found}: give the directory Snakemake's benchmark: files are written to "
        "(results/job_records), after the jobs ran"
    )


def job_times_table(records: pd.DataFrame, missing: Sequence[str] = ()) -> tuple[pd.DataFrame, str]:
    """Per rule and family: jobs, total and maximum seconds, the slowest job; then all of them."""
    rows = []
    for (rule, family), part in records.groupby(["rule", "family"], sort=True):
        slowest = part.loc[part["seconds"].idxmax()]
        rows.append(
            [rule, family, len(part), part["seconds"].sum(), slowest["seconds"], slowest["job"]]
        )
    if len(records):
        slowest = records.loc[records["seconds"].idxmax()]
        name = "/".join(x for x in (slowest["rule"], slowest["family"], slowest["job"]) if x)
        rows.append(["all", "", len(records), records["seconds"].sum(), slowest["seconds"], name])
    table = pd.DataFrame(rows, columns=COLUMNS).round({"Total s": 1, "Max s": 1})
    caption = (
        "**Job times.** Wall time of each pipeline job from Snakemake's job records "
        "(results/job_records/<rule>/<wildcards>.tsv), per rule and family: number of jobs, their "
        "total and the longest. Totals add up jobs, some of which ran side by side: they are not "
        "the pipeline's elapsed time."
    )
    if missing:
        caption += (
            f" {len(missing)} job(s) without a record (run before records were kept, or not run)."
        )
    return table, caption


def write_job_times(
    root: str | Path,
    out_stem: str | Path,
    jobs: Sequence[str | Path] | None = None,
    config_sha256: str | None = None,
    rehearsal: bool = False,
) -> list[Path]:
    """The job-times table of the records under `root` (or only `jobs`) as <out_stem>.csv/.md/.tex/.html;
    ValueError if there is none."""
    records, missing = load_job_times(root, jobs)
    require_records(records, missing, root)
    table, caption = job_times_table(records, missing)
    return write_table(
        table, out_stem, caption, config_sha256, rehearsal, command="tapernorm job-times"
    )
