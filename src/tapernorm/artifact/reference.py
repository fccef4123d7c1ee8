"""Committed reference runs, and the README's and docs' blocks generated from them.

A reference run is one pipeline run's summary kept in the repository under
`results/reference/<host>-<commit>/`, which no later run writes to: its claims (md, json, html),
tables (md, csv), benchmark CSVs, figure PNGs, the run's full manifest (hashes of everything it
read and wrote, models and data included), its Snakemake log (the run's wall time) and a manifest
of its own files. `tapernorm snapshot` makes one from a finished run, after checking the run's
files against its manifest.

The README's and docs' numbers from a run are generated from a reference run (doc_blocks.py).
"""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
from pathlib import Path

from ..runtime import bookkeeping
from ..runtime.jsonio import write_json
from ..runtime.provenance import now
from .manifest import FORMAT, check_manifest, file_entry, manifest_root, read_manifest

REFERENCE_ROOT = Path("results/reference")
# what a reference keeps of a run (relative to the run's root); everything else is only hashed
KEPT = (
    "results/claims.md",
    "results/claims.json",
    "results/claims.html",
    "results/manifest.json",
    "results/tables/*.md",
    "results/tables/*.csv",
    "results/bench/*.csv",
    "figures/*.png",
)
LOG_NAME = "snakemake.log"


class ReferenceError(ValueError):
    """A reference run that cannot be made or read, or a generated block out of date."""


# ---- making a reference run ---------------------------------------------------------------------


def host_slug(cpu: str, cores: int | None) -> str:
    """'intel-xeon-2c' from 'Intel(R) Xeon(R) Processor' and 2 cores."""
    words = re.sub(r"\((r|tm)\)", " ", cpu.lower())
    words = re.sub(r"\b(processor|cpu|with|radeon|graphics)\b", " ", words)
    slug = re.sub(r"[^a-z0-9]+", "-", words).strip("-") or "host"
    return f"{slug}-{cores}c" if cores else slug


def reference_name(manifest: dict) -> str:
    """<host>-<commit>, '-dirty' added where the code was (uncommitted results do not count; a
    manifest from before provenance told the two apart: where its tree was)."""
    made = manifest["made"]
    code_dirty = made.get("code_dirty", made.get("dirty"))
    commit = str(made["commit"])[:12] + ("-dirty" if code_dirty else "")
    return f"{host_slug(made['host']['cpu'], made['host'].get('cores'))}-{commit}"


_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_DONE = re.compile(r"^(\d+) of (\d+) steps \(100%\) done$")


def log_wall(log: Path) -> dict:
    """Start, end and wall seconds of a finished Snakemake run from its log (the first and the
    last timestamp line), and the jobs it ran; raises if the log does not end with every job done."""
    lines = log.read_text(errors="replace").splitlines()
    stamps = [
        datetime.datetime.strptime(" ".join(m[1].split()), "%a %b %d %H:%M:%S %Y")
        for line in lines
        if (m := _STAMP.match(line.strip()))
    ]
    done = [m for line in lines if (m := _DONE.match(line.strip()))]
    if not stamps or not done or done[-1][1] != done[-1][2]:
        raise ReferenceError(f"Snakemake log {log}: not a finished run (no 'N of N steps done')")
    return {
        "started": stamps[0].isoformat(),
        "ended": stamps[-1].isoformat(),
        "wall_seconds": int((stamps[-1] - stamps[0]).total_seconds()),
        "jobs": int(done[-1][2]),
    }


def latest_log(workdir: Path) -> Path:
    """The newest Snakemake log of a run that finished every job (a --report or dry run logs
    too, and finishes none)."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for log in logs:
        try:
            log_wall(log)
        except ReferenceError:
            continue
        return log
    raise ReferenceError(f"no finished run's Snakemake log under {workdir / '.snakemake' / 'log'}")


def snapshot(
    run_manifest: str | Path,
    to: str | Path | None = None,
    log: str | Path | None = None,
    conditions: str = "",
) -> Path:
    """Copy a finished run's summary (KEPT) into a reference directory (default
    results/reference/<host>-<commit>) with its Snakemake log and a manifest of the copies."""
    run_manifest = Path(run_manifest)
    manifest = read_manifest(run_manifest)
    root = manifest_root(run_manifest, manifest)
    ok, problems = check_manifest(run_manifest)
    if problems:
        raise ReferenceError(
            f"{run_manifest}: the run's files differ from its manifest ({problems[0]}; "
            f"{len(problems)} in all): rerun the pipeline first"
        )
    dest = Path(to) if to is not None else root / REFERENCE_ROOT / reference_name(manifest)
    if dest.exists():
        raise ReferenceError(f"{dest} exists: a reference run is never overwritten")
    log = Path(log) if log is not None else latest_log(root)
    wall = log_wall(log)
    kept = sorted({p.relative_to(root).as_posix() for pat in KEPT for p in root.glob(pat)})
    kept = [k for k in kept if k in manifest["files"] or k == "results/manifest.json"]
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in kept:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, tmp / rel)
    shutil.copy2(log, tmp / LOG_NAME)
    run = ("made", "config_file_sha256", "config_sha256", "config", "seeds", "threads", "runs")
    own = {
        "format": FORMAT,
        **{key: manifest[key] for key in run if key in manifest},  # (older: no config_file_sha256)
        "snapshot": {
            "of": "results/manifest.json",
            "written": now(),
            "snakemake": wall,
            "conditions": conditions,
        },
        "root": ".",
        "files": {rel: file_entry(tmp / rel) for rel in [*kept, LOG_NAME]},
    }
    write_json(tmp / "manifest.json", own)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)
    return dest


# ---- what a run's log says ran -----------------------------------------------------------------

_CONFIG_FILES = re.compile(r"^\s*Config file\(s\): \[(.*)\]\s*$")
_QUOTED = re.compile(r"'([^']+)'")
DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's configfile


def log_jobs(log: Path) -> dict[str, int]:
    """{rule: jobs} of the first 'Job stats:' table of a Snakemake log (what the run planned)."""
    lines = log.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Job stats:"), None)
    jobs: dict[str, int] = {}
    for line in lines[start + 3 :] if start is not None else []:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] != "total":
            jobs[parts[0]] = int(parts[1])
    return jobs


def log_config(log: Path) -> str:
    """The config a Snakemake run read, from its log: 'the default config' for the Snakefile's own
    (config/config.yaml), else its file names; 'a config its log does not name' if none is."""
    for line in log.read_text(errors="replace").splitlines():
        m = _CONFIG_FILES.match(line)
        if m:
            names = [Path(p).as_posix() for p in _QUOTED.findall(m[1])]
            names = ["/".join(Path(p).parts[-2:]) for p in names]
            if names == [DEFAULT_CONFIG]:
                return "the default config"
            return " + ".join(f"`{n}`" for n in names) or "a config its log does not name"
    return "a config its log does not name"


def run_scope(ref: Path, manifest: dict) -> dict:
    """What the reference run's log ran: its jobs, its config and whether it was the whole DAG:
    every job that left a job record in the run (results/job_records/<rule>/...) ran in it, not
    only a partial rerun of some of them."""
    log = ref / LOG_NAME
    jobs = log_jobs(log)
    run = ref / "results" / "manifest.json"
    files = read_manifest(run)["files"] if run.is_file() else {}
    recorded: dict[str, int] = {}
    for rel in files:
        parts = rel.split("/")
        if rel.startswith("results/job_records/") and len(parts) > 3:
            recorded[parts[2]] = recorded.get(parts[2], 0) + 1
    whole = all(jobs.get(rule, 0) >= n for rule, n in recorded.items())
    return {
        "jobs": manifest["snapshot"]["snakemake"]["jobs"],
        "whole": whole,
        "recorded": sum(recorded.values()),
        "config": log_config(log),
    }


def scope_text(scope: dict) -> str:
    """'the whole DAG (63 jobs)', or 'a partial rerun (3 jobs; not the whole DAG)'."""
    if scope["whole"]:
        return f"the whole DAG ({scope['jobs']} jobs)"
    return f"a partial rerun ({scope['jobs']} jobs; not the whole DAG)"


# ---- reading one ----------------------------------------------------------------------------------


def load_reference(ref: str | Path) -> dict:
    """A reference directory's manifest, claims record, what its run ran (run_scope) and the
    directory itself, after checking its files against its manifest (an edited or missing file
    is a ReferenceError: nothing is quoted from it)."""
    ref = Path(ref)
    manifest = read_manifest(ref / "manifest.json")
    if "snapshot" not in manifest:
        raise ReferenceError(f"{ref}: its manifest.json is a run's, not a reference run's")
    _, problems = check_manifest(ref / "manifest.json")
    if problems:
        raise ReferenceError(
            f"{ref}: its files differ from its manifest.json ({problems[0]}; {len(problems)} in "
            f"all): restore them (git checkout -- {ref}) or point the block at another reference"
        )
    claims = bookkeeping.read(bookkeeping.CLAIMS_RECORD, ref / "results" / "claims.json")
    return {"dir": ref, "manifest": manifest, "claims": claims, "scope": run_scope(ref, manifest)}


def wall_text(manifest: dict) -> str:
    seconds = manifest["snapshot"]["snakemake"]["wall_seconds"]
    return f"{seconds // 60} min {seconds % 60} s"


# ---- is it still the code at HEAD? ----------------------------------------------------------------

# what can change a number of the default pipeline: the package, the workflow, the default config
# and the pinned environment; less what only renders the docs from a reference run
RESULT_PATHS = ("src/tapernorm", "workflow", "config/config.yaml", "requirements", "pyproject.toml")
RENDER_ONLY = ("src/tapernorm/artifact/doc_blocks.py", "src/tapernorm/artifact/reference.py")


def changed_since(commit: str, repo: Path, head: str = "HEAD") -> list[str]:
    """The files under RESULT_PATHS (less RENDER_ONLY) that differ between `commit` and `head`:
    empty where the reference run is the code at `head`, as far as results go."""
    diff = subprocess.run(
        ["git", "diff", "--name-only", commit, head, "--", *RESULT_PATHS],
        cwd=repo, capture_output=True, text=True,
    )  # fmt: skip
    if diff.returncode:
        raise ReferenceError(f"git diff {commit[:12]} {head}: {diff.stderr.strip()}")
    return [f for f in diff.stdout.split() if f not in RENDER_ONLY]
