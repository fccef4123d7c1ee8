"""Where an output came from: the code's commit (and whether the tree was dirty), the config's two
hashes (of the files given, and of the validated config), the host, the library versions and every
installed distribution; a stamp of them for tables and figures.

Nothing here imports torch at module level: the Snakefile and the analysis commands use it too.
The commit is that of the git work tree holding this package's source (an editable install, the
project's layout); outside one, TAPERNORM_COMMIT names it, or it is unknown.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from .digests import file_sha256, json_sha256

UNKNOWN = "unknown"
SHORT = 12  # hex digits of a commit or a hash in a stamp


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def code_root() -> Path:
    """The directory of this package's source (src/tapernorm in the project's checkout)."""
    return Path(__file__).resolve().parents[1]


KEPT_CHANGES = 20  # changed paths a provenance record lists (all are counted)
RESULT_PATHS = ("results/",)  # committed outputs: a change there is not a change of the code


def git_state(root: str | Path | None = None) -> dict:
    """{"commit": full sha or "unknown", "dirty": whether tracked or untracked (not ignored) files
    differ from the commit, or None when unknown}; a dirty tree also says what differs:
    "changed" (git status --porcelain's lines, the first KEPT_CHANGES), "n_changed", and
    "code_dirty" (whether any changed path lies outside the committed results, RESULT_PATHS: a
    study's new records make a tree dirty without changing the code that trains it)."""
    root = Path(root) if root is not None else code_root()
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": os.environ.get("TAPERNORM_COMMIT", UNKNOWN), "dirty": None}
    status = _git(root, "status", "--porcelain")
    state = {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}
    if state["dirty"]:
        lines = [line for line in status.splitlines() if line.strip()]
        paths = [line[3:].split(" -> ")[-1].strip('"') for line in lines]
        state.update(
            changed=lines[:KEPT_CHANGES],
            n_changed=len(lines),
            code_dirty=any(not p.startswith(RESULT_PATHS) for p in paths),
        )
    return state


def config_hash(config: dict) -> str:
    """config_sha256: sha256 of a validated config's canonical JSON (sorted keys, no whitespace).
    The schema's defaults are filled in, so it changes with them while the config files do not."""
    return json_sha256(config)


def config_file_hashes(paths: Iterable[str | Path]) -> dict[str, str]:
    """config_file_sha256: {path: sha256 of the file's bytes} of each config file given, in order
    (a path under the working directory relative to it): an unchanged file keeps its hash."""
    out = {}
    for path in paths:
        name = os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else path
        out[Path(name).as_posix()] = file_sha256(path)
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or UNKNOWN


def host() -> dict:
    """The machine: CPU, logical cores, OS and architecture (no host name)."""
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
    }


def versions() -> dict:
    """Python and the libraries the numbers depend on (torch imported only if installed)."""
    out = {"python": platform.python_version()}
    for name in ("torch", "numpy", "pandas", "matplotlib"):
        try:
            module = sys.modules.get(name) or __import__(name)
        except ImportError:
            continue
        out[name] = getattr(module, "__version__", UNKNOWN)
    try:
        out["tapernorm"] = metadata.version("tapernorm")
    except metadata.PackageNotFoundError:
        out["tapernorm"] = UNKNOWN
    return out


def canonical_name(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions() -> dict[str, str]:
    """{name: version} of every installed distribution (importlib.metadata), sorted by canonical
    name; of two with one name, the first on sys.path (the one `import` finds)."""
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and canonical_name(name) not in out:
            out[canonical_name(name)] = dist.version
    return dict(sorted(out.items()))


def made() -> dict:
    """What made a record: the commit, the host, the headline versions, every installed
    distribution and the time (a manifest's or a study's "made")."""
    return {
        **git_state(),
        "host": host(),
        "versions": versions(),
        "distributions": distributions(),
        "written": now(),
    }


def now() -> str:
    """The current time in UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def short_commit(state: dict) -> str:
    """'0123456789ab', with ' (dirty tree)' where code differed from the commit, or ' (code
    clean; uncommitted results)' where only the committed results did (git_state's code_dirty)."""
    commit = state["commit"]
    text = commit[:SHORT] if commit != UNKNOWN else "commit unknown"
    if not state.get("dirty"):
        return text
    return text + (" (code clean; uncommitted results)" if state.get("code_dirty") is False
                   else " (dirty tree)")  # fmt: skip


REHEARSAL = "REHEARSAL on stand-in data and models, not results"
REHEARSAL_NOTE = (
    "REHEARSAL: this run is a rehearsal of the paper path (config/rehearsal.yaml) on offline "
    "stand-ins of its data sets and GPT-2 models, with steps, sizes and seeds shrunk for a CPU. "
    "Its numbers exercise the code and measure nothing about the method: no verdict here is a result."
)


def stamp(
    config_sha256: str | None = None, state: dict | None = None, rehearsal: bool = False
) -> str:
    """One line naming what made an output: 'tapernorm 0123456789ab · config 89ab...', led by
    REHEARSAL for a rehearsal of the paper path (config/rehearsal.yaml)."""
    text = f"tapernorm {short_commit(state or git_state())}"
    if config_sha256:
        text += f" · config {config_sha256[:SHORT]}"
    return f"{REHEARSAL} · {text}" if rehearsal else text
