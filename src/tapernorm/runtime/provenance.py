"""Where an output came from: the code's commit (and whether the tree was dirty, and which of its
changes are code), the config's two hashes (of the files given, and of the validated config), the
host, the library versions and every installed distribution; a stamp of them for tables and
figures; and the check that refuses to write results from code that differs from its commit
(writing_results, which the command line runs around every command that writes results).

Nothing here imports torch at module level: the Snakefile and the analysis commands use it too.
The commit is that of the git work tree holding this package's source (an editable install, the
project's layout); outside one, TAPERNORM_COMMIT names it, or it is unknown.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
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
# Code: what makes the numbers, relative to the checkout's root: the package's source, the
# workflow, the configs the workflow runs (an uncommitted one is in no commit, though its hash is
# stamped) and what installs the environment. Not code: results/ (committed outputs: a study's new
# records make a tree dirty without changing the code), documentation (*.md anywhere), tests/ and
# every other path (untracked outputs among them; data/, logs/ and figures/ are ignored anyway).
CODE_PATHS = (
    "src/",
    "workflow/",
    "Snakefile",
    "config/",
    "benchmarks/",
    "pyproject.toml",
    "requirements/",
    "environment.yml",
)
ALLOW_DIRTY_ENV = "TAPERNORM_ALLOW_DIRTY"  # set (not "" or "0"): as --allow-dirty


def is_code(path: str) -> bool:
    """Whether a path of the checkout (relative to its root, as git status names it) is code:
    one of CODE_PATHS or under one ending in '/', Markdown excepted."""
    path = path.strip('"')
    if path.endswith(".md"):
        return False
    return any(path.startswith(p) if p.endswith("/") else path == p for p in CODE_PATHS)


def _status_paths(line: str) -> list[str]:
    """The paths of one line of git status --porcelain: a rename's both."""
    return [p.strip('"') for p in line[3:].split(" -> ")]


def dirty_code_allowed() -> bool:
    """Whether results may be written from dirty code (--allow-dirty, or ALLOW_DIRTY_ENV set)."""
    return os.environ.get(ALLOW_DIRTY_ENV, "") not in ("", "0")


def _tracked(root: Path) -> bool:
    """Whether `root` is tracked by the work tree around it: the package in an ignored or
    untracked directory (installed into a virtual environment inside some other checkout) is in
    no commit of that checkout."""
    return bool((_git(root, "ls-files", "--", "__init__.py") or "").strip())


def git_state(root: str | Path | None = None) -> dict:
    """{"commit": full sha or "unknown", "dirty": whether tracked or untracked (not ignored) files
    differ from the commit, or None when unknown}; a dirty tree also says what differs:
    "changed" (git status --porcelain's lines, the first KEPT_CHANGES), "n_changed",
    "code_changed" (the first KEPT_CHANGES of those paths that are code: is_code), "code_dirty"
    (whether there is any), and, where code is dirty and writing was allowed (--allow-dirty or
    ALLOW_DIRTY_ENV), "allow_dirty": true. Outside a work tree that tracks this package (an
    installed package, no git), the commit is TAPERNORM_COMMIT's or unknown, and dirty None."""
    if root is None:
        root = code_root()
        commit = _git(root, "rev-parse", "HEAD") if _tracked(root) else None
    else:
        root = Path(root)
        commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": os.environ.get("TAPERNORM_COMMIT", UNKNOWN), "dirty": None}
    status = _git(root, "status", "--porcelain")
    state = {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}
    if state["dirty"]:
        lines = [line for line in status.splitlines() if line.strip()]
        code = [p for line in lines for p in _status_paths(line) if is_code(p)]
        state.update(
            changed=lines[:KEPT_CHANGES],
            n_changed=len(lines),
            code_changed=code[:KEPT_CHANGES],
            code_dirty=bool(code),
        )
        if code and dirty_code_allowed():
            state["allow_dirty"] = True
    return state


class DirtyCodeError(RuntimeError):
    """Results asked of code that differs from its commit, without --allow-dirty."""


def refuse_dirty_code(state: dict | None = None) -> None:
    """DirtyCodeError, in one line naming the changed code and what to do, where `state`
    (default: git_state()) has dirty code and writing it was not allowed; nothing where the code
    is clean, only results differ, or the state is unknown (no git: nothing to compare)."""
    if dirty_code_allowed():
        return
    state = git_state() if state is None else state
    if not state.get("code_dirty"):
        return
    code = state.get("code_changed", [])
    named = ", ".join(code[:3]) + (", ..." if len(code) > 3 else "")
    raise DirtyCodeError(
        f"the code differs from commit {state['commit'][:SHORT]} ({named}): "
        f"commit it, or pass --allow-dirty (or set {ALLOW_DIRTY_ENV}=1) to write results from it, "
        "recorded as allow_dirty in their provenance"
    )


@contextlib.contextmanager
def writing_results(allow_dirty: bool = False) -> Iterator[None]:
    """Around a command that writes results (a record, a summary, a table, a figure): refuses
    dirty code before it starts (refuse_dirty_code), unless `allow_dirty`; with `allow_dirty`,
    ALLOW_DIRTY_ENV is set while it runs, so that what it records says so (git_state's
    allow_dirty) and the processes it starts are allowed too; put back afterwards."""
    previous = os.environ.get(ALLOW_DIRTY_ENV)
    if allow_dirty:
        os.environ[ALLOW_DIRTY_ENV] = "1"
    try:
        refuse_dirty_code()
        yield
    finally:
        if allow_dirty:
            if previous is None:
                os.environ.pop(ALLOW_DIRTY_ENV, None)
            else:
                os.environ[ALLOW_DIRTY_ENV] = previous


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


def made(every_distribution: bool = True) -> dict:
    """What made a record: the commit, the host, the headline versions, every installed
    distribution (unless `every_distribution` is false: a summary's or the claims') and the time
    (a manifest's or a study's "made")."""
    listed = {"distributions": distributions()} if every_distribution else {}
    return {**git_state(), "host": host(), "versions": versions(), **listed, "written": now()}


def now() -> str:
    """The current time in UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def short_commit(state: dict) -> str:
    """'0123456789ab', with ' (dirty tree)' where code differed from the commit (' (dirty code,
    --allow-dirty)' where writing from it was allowed), or ' (code clean; uncommitted results)'
    where only results did (git_state's code_dirty)."""
    commit = state["commit"]
    text = commit[:SHORT] if commit != UNKNOWN else "commit unknown"
    if not state.get("dirty"):
        return text
    if state.get("code_dirty") is False:
        return text + " (code clean; uncommitted results)"
    return text + (" (dirty code, --allow-dirty)" if state.get("allow_dirty") else " (dirty tree)")


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
