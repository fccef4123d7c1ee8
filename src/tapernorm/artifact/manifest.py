"""The manifest of a pipeline run, and the check of a result tree against it.

`results/manifest.json` (rule `manifest`, the DAG's last job) records what made the run (the
commit and whether the tree was dirty, the sha256 of each config file given (config_file_sha256),
the validated config and its sha256 (config_sha256), the host, the library versions and every
installed distribution, the training and benchmark threads, the seeds of each family, when its
runs started and ended) and the sha256 and size of every file the run read or wrote: data shards
and tokenizers, every run's config, weights, metrics and evaluation, fold checks, benchmarks, job
records, tables, figures and claims. Paths are relative to the manifest's `root` (relative to the
manifest's own directory), so a copied tree checks where it lies:

    tapernorm check-manifest results/manifest.json      # names every file that changed or is gone

and warns (one line) when the environment checking it differs from the one that made it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..runtime import bookkeeping
from ..runtime.digests import file_sha256
from ..runtime.jsonio import read_json, write_json
from ..runtime.provenance import config_hash, made

FORMAT = "tapernorm manifest 1"


class ManifestError(ValueError):
    """A manifest that cannot be read, or a file it must list that is missing."""


def file_entry(path: Path) -> dict:
    return {"sha256": file_sha256(path), "bytes": path.stat().st_size}


def _run_provenance(root: Path, files: list[str]) -> list[dict]:
    """meta.provenance of every run directory's config.json among `files`."""
    out = []
    for rel in files:
        if not rel.endswith("/config.json"):
            continue
        try:
            made = read_json(root / rel).get("meta", {}).get("provenance")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(made, dict):
            out.append(made)
    return out


def _bench_threads(root: Path, files: list[str]) -> list[int]:
    import csv

    threads = set()
    for rel in files:
        if rel.startswith("results/bench/") and rel.endswith(".csv"):
            with open(root / rel, newline="") as f:
                threads |= {int(r["threads"]) for r in csv.DictReader(f) if r.get("threads")}
    return sorted(threads)


def expand_dirs(files: Iterable[str | Path], root: Path) -> list[str]:
    """`files` with each directory among them (a workflow's directory output, e.g. a fold check's
    folded model) replaced by the files under it, hidden ones (Snakemake's timestamp) left out."""
    out = []
    for f in files:
        if not (root / f).is_dir():
            out.append(Path(f).as_posix())
            continue
        for path in sorted((root / f).rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and not any(part.startswith(".") for part in rel.parts):
                out.append(rel.as_posix())
    return out


def build_manifest(
    files: Iterable[str | Path],
    config: dict,
    seeds: dict,
    root: Path,
    config_files: dict[str, str] | None = None,
) -> dict:
    """The manifest of `files` (paths relative to `root`, each must exist; a directory stands for
    the files under it: expand_dirs) made under `config`, read from `config_files` ({path:
    sha256}: provenance.config_file_hashes; empty when not given)."""
    rels = sorted(dict.fromkeys(expand_dirs(files, root)))
    missing = [f for f in rels if not (root / f).is_file()]
    if missing:
        raise ManifestError(f"manifest: {len(missing)} listed files do not exist: {missing[:5]}")
    runs = _run_provenance(root, rels)
    started = [r["started"] for r in runs if r.get("started")]
    ended = [r["finished"] for r in runs if r.get("finished")]
    return {
        "format": FORMAT,
        "made": made(),
        "config_file_sha256": dict(config_files or {}),
        "config_sha256": config_hash(config),
        "config": config,
        "seeds": seeds,
        "threads": {
            "training": sorted({r["threads"] for r in runs if "threads" in r}),
            "benchmarks": _bench_threads(root, rels),
        },
        "runs": {
            "count": len(runs),
            "first_started": min(started) if started else None,
            "last_finished": max(ended) if ended else None,
            "commits": sorted({r.get("commit", "unknown") for r in runs}),
        },
        "root": None,  # set by write_manifest
        "files": {f: file_entry(root / f) for f in rels},
    }


def write_manifest(
    out: str | Path,
    files: Iterable[str | Path],
    config: dict,
    seeds: dict,
    root: str | Path = ".",
    config_files: dict[str, str] | None = None,
) -> dict:
    """Build the manifest of `files` (relative to `root`) and write it to `out`; returns it."""
    out, root = Path(out), Path(root)
    manifest = build_manifest(files, config, seeds, root, config_files)
    manifest["root"] = Path(os.path.relpath(root.resolve(), out.resolve().parent)).as_posix()
    write_json(out, manifest)
    return manifest


def read_manifest(path: str | Path) -> dict:
    """The manifest in `path`: ManifestError (one line naming it) unless it is one."""
    try:
        manifest = bookkeeping.read(bookkeeping.MANIFEST, path)
    except bookkeeping.BookkeepingError as e:
        raise ManifestError(f"manifest: {e}") from None
    if manifest["format"] != FORMAT:
        raise ManifestError(f"manifest {path}: not a {FORMAT!r} file")
    bad = [rel for rel, entry in manifest["files"].items() if not _entry(entry)]
    if bad:
        raise ManifestError(
            f"manifest {path}: the entry of {bad[0]!r} has no sha256 string "
            f"({bookkeeping.MANIFEST.fix})"
        )
    return manifest


def _entry(entry: object) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("sha256"), str)


def manifest_root(path: str | Path, manifest: dict) -> Path:
    """The directory the manifest's paths are relative to."""
    return (Path(path).parent / (manifest.get("root") or ".")).resolve()


def check_manifest(path: str | Path, root: str | Path | None = None) -> tuple[int, list[str]]:
    """(files that match, problems): 'changed: PATH' (its sha256 differs), 'missing: PATH'."""
    manifest = read_manifest(path)
    base = Path(root) if root is not None else manifest_root(path, manifest)
    problems, ok = [], 0
    for rel, entry in manifest["files"].items():
        file = base / rel
        if not file.is_file():
            problems.append(f"missing: {rel}")
        elif file_sha256(file) != entry["sha256"]:
            problems.append(f"changed: {rel} (sha256 differs from the manifest's)")
        else:
            ok += 1
    return ok, problems
