"""The environment a reference run was made in: its lock (a pip constraints file of exact versions,
committed as requirements/constraints-cpu.txt) and the check that names what differs from it.

    pip install -c requirements/constraints-cpu.txt -e ".[dev]"    # the reference's versions
    tapernorm lock-env                 # regenerate the lock from a clean install of .[dev]
    tapernorm check-env                # this environment against the lock (or --against a record)

A reference is a constraints file or a JSON record of a run: a manifest, a study (lr_grid.json) or
a run's config.json, whose "made" (meta.provenance) lists every installed distribution; records
older than that list give their headline versions only (torch, numpy, pandas, matplotlib). A
version without a local label (torch==2.13.0) matches any build of it (2.13.0+cpu, the CUDA
2.13.0), as pip's == does; one with a label matches only itself.
"""

from __future__ import annotations

import logging
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..runtime import bookkeeping
from ..runtime.atomic import atomic_write_bytes
from ..runtime.provenance import canonical_name, distributions

log = logging.getLogger(__name__)

CONSTRAINTS = Path("requirements/constraints-cpu.txt")  # relative to the repository root
NOT_LOCKED = ("pip", "tapernorm")  # the installer (the venv's own), and the project itself
NOT_DISTRIBUTIONS = ("python", "tapernorm")  # in a record's headline "versions"
SHOWN = 8  # differences named in the one-line warning (check-env lists all)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


@dataclass(frozen=True)
class Difference:
    name: str
    reference: str
    installed: str | None  # None: not installed

    def __str__(self) -> str:
        return f"{self.name} {self.installed or 'not installed'} (reference {self.reference})"


LOCK_HEAD = b"# The versions a clean install of tapernorm[dev]"  # how a lock file begins


def lock_text(dists: dict[str, str]) -> str:
    """A constraints file pinning `dists` (without NOT_LOCKED; local labels dropped, so that the
    CPU lock admits the CUDA build of the same torch)."""
    lines = [
        LOCK_HEAD.decode() + " brought (the reference run's), made by",
        "# `tapernorm lock-env` in a fresh virtual environment after the README's install:",
        f"#   Python {platform.python_version()} on {sys.platform}, torch from PyTorch's CPU index.",
        '# Use: pip install -c requirements/constraints-cpu.txt -e ".[dev]"',
    ]
    for name, version in sorted(dists.items()):
        if canonical_name(name) not in NOT_LOCKED:
            lines.append(f"{name}=={version.split('+')[0]}")
    return "\n".join(lines) + "\n"


def is_lock_file(path: str | Path) -> bool:
    """Whether `path` begins as lock_text's files do (an earlier output of `tapernorm lock-env`)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(LOCK_HEAD)) == LOCK_HEAD
    except OSError:
        return False


def write_lock(path: str | Path, dists: dict[str, str] | None = None) -> int:
    """Write the lock of `dists` (default: this environment's) to `path`; returns how many pins."""
    text = lock_text(distributions() if dists is None else dists)
    atomic_write_bytes(Path(path), text.encode())
    return sum(1 for line in text.splitlines() if not line.startswith("#"))


def read_constraints(path: str | Path) -> dict[str, str]:
    """{canonical name: version} of a constraints file's `name==version` lines."""
    pins = {}
    for line in bookkeeping.read_lines(bookkeeping.ENV_LOCK, path):
        match = _PIN.match(line.strip())
        if match:
            pins[canonical_name(match[1])] = match[2]
    if not pins:
        raise bookkeeping.fail(bookkeeping.ENV_LOCK, path, "has no name==version line")
    return pins


def recorded_distributions(record: dict) -> dict[str, str]:
    """{canonical name: version} a JSON record says were installed: its "made" (a manifest, a
    study) or meta.provenance (a run's config.json); every distribution, or for an older record
    its headline versions."""
    made = record.get("made") or record.get("meta", {}).get("provenance") or {}
    found = made.get("distributions") if isinstance(made, dict) else None
    if not isinstance(found, dict):
        versions = made.get("versions") if isinstance(made, dict) else None
        versions = versions if isinstance(versions, dict) else {}
        found = {k: v for k, v in versions.items() if k not in NOT_DISTRIBUTIONS}
    return {canonical_name(k): str(v) for k, v in found.items()}


def reference_of(path: str | Path) -> dict[str, str]:
    """The distributions of a reference: a JSON record, else a constraints file."""
    path = Path(path)
    if path.suffix != ".json":
        return read_constraints(path)
    found = recorded_distributions(bookkeeping.read(bookkeeping.ENV_RECORD, path))
    if not found:
        raise bookkeeping.fail(bookkeeping.ENV_RECORD, path, "names no installed distributions")
    return found


def _matches(reference: str, installed: str) -> bool:
    return installed == reference or ("+" not in reference and installed.split("+")[0] == reference)


def differences(reference: dict[str, str], installed: dict[str, str]) -> list[Difference]:
    """The reference's distributions whose installed version differs or that are missing (extra
    installed distributions are not differences: a constraints file does not forbid them)."""
    have = {canonical_name(k): v for k, v in installed.items()}
    return [
        Difference(name, version, have.get(name))
        for name, version in sorted(reference.items())
        if name not in have or not _matches(version, have[name])
    ]


def warning_line(found: list[Difference], source: str | Path) -> str:
    """One line naming the differences (at most SHOWN) and both versions of each."""
    shown = ", ".join(str(d) for d in found[:SHOWN])
    more = (
        f" and {len(found) - SHOWN} more (tapernorm check-env lists all)"
        if len(found) > SHOWN
        else ""
    )
    return f"this environment differs from {source} in {len(found)} distributions: {shown}{more}"


def environment_warning(source: str | Path, installed: dict[str, str] | None = None) -> str | None:
    """The one-line warning that this environment (or `installed`) differs from the reference at
    `source`; None when it matches or there is no readable reference there."""
    try:
        reference = reference_of(source)
    except (OSError, ValueError) as e:
        log.debug("no environment reference at %s: %s", source, e)
        return None
    found = differences(reference, distributions() if installed is None else installed)
    return warning_line(found, source) if found else None
