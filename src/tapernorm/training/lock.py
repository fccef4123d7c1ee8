"""One writer per run directory: an advisory lock (flock) on out/train.lock, which records the
owner's pid and host (and one export per export directory: export_lock, on `.OUT.export.lock`
beside it). A second writer is refused with the owner's name, or (`wait`) waits for the owner to
end; a lock file left by a killed process holds no lock (the kernel dropped it with the process)
and is taken over. The lock file is never opened through a symbolic link (runtime.links).

Snakemake's own lock (.snakemake/locks) keeps a second invocation off the outputs of a running
one, unless it is started with --nolock. Such an invocation, with --rerun-incomplete, sees the
running job's outputs as incomplete: it deletes them and starts the job again. The workflow's jobs
wait for this lock instead of failing (the workflow sets WAIT_ENV: `tapernorm train --wait`),
since Snakemake deletes a failed job's outputs too; the running job puts its record back
(metrics_log) and writes every other output at its end, and the waiting job then finds the run
finished and leaves it alone."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..runtime import bookkeeping, jsonio
from ..runtime.links import open_own

log = logging.getLogger(__name__)

LOCK_NAME = "train.lock"
EXPORT_LOCK_SUFFIX = ".export.lock"  # `.OUT.export.lock`, beside an export's --out
WAIT_ENV = "TAPERNORM_TRAIN_WAIT"  # when set (not 0), `tapernorm train` waits: the workflow sets it


class RunLocked(RuntimeError):
    """Another process is writing the run directory."""


class LockFileError(RuntimeError):
    """The lock file's path holds something that is not a lock file (a directory, ...)."""


def _open_lock(path: Path, what: str = "the run's lock file") -> int:
    """`path` opened (created if absent), never through a symbolic link (LinkRefused)."""
    try:
        return open_own(path, os.O_RDWR | os.O_CREAT, what)
    except (IsADirectoryError, NotADirectoryError, PermissionError) as e:
        raise LockFileError(
            f"{path}, {what}, cannot be opened ({e.strerror}): if no tapernorm command is writing "
            "there, remove it (it is only the lock) and run the command again"
        ) from None


def _owner(fd: int, path: Path) -> dict:
    """The owner the lock file records; {} while it is empty (just created, or its owner is
    between truncating and writing it). BookkeepingError naming it if it is damaged."""
    data = os.pread(fd, 4096, 0)
    return bookkeeping.parse(bookkeeping.RUN_LOCK, path, data) if data else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(owner: dict) -> str:
    return f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}"


def _acquire(fd: int, lock: Lock, wait: bool) -> None:
    """flock `fd`; if another process holds it: RunLocked, or with `wait` block until it ends."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
    owner = _owner(fd, lock.path)
    if not wait:
        raise RunLocked(
            f"{lock.target} is being written by another tapernorm {lock.command} "
            f"({_describe(owner)}, {lock.path}): wait for it to end{lock.wait_hint} or use "
            "another --out"
        )
    log.info("[%s] waiting for %s, which is writing %s", lock.name, _describe(owner), lock.target)
    fcntl.flock(fd, fcntl.LOCK_EX)


@dataclass(frozen=True)
class Lock:
    """One writer of `target` at a time: the lock file `path` that `command` holds meanwhile."""

    path: Path
    target: str  # what the lock keeps one writer of, in words ("run directory X", "--out X")
    command: str
    what: str  # what the lock file is, in words
    name: str = "run"  # the log's label
    wait_hint: str = ""  # how to wait instead of stopping, if the command can


def _open_held(lock: Lock, wait: bool) -> int:
    """The lock file opened and flocked; opened again when its owner removed it meanwhile."""
    while True:
        fd = _open_lock(lock.path, lock.what)
        try:
            _acquire(fd, lock, wait)
        except BaseException:
            os.close(fd)
            raise
        # The previous owner may have removed the file between our open and our flock: then the
        # lock we hold is on a file nobody else sees; open the path again.
        try:
            same = os.stat(lock.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextlib.contextmanager
def hold(lock: Lock, wait: bool = False) -> Iterator[None]:
    """Hold `lock` for the block; RunLocked if another process holds it, or with `wait` wait
    until it ends. The lock file records this process (pid, host) and is removed when the block
    ends; one a killed process left holds no lock and is taken over."""
    fd = _open_held(lock, wait)
    try:
        previous, host = _owner(fd, lock.path), socket.gethostname()
    except BaseException:
        os.close(fd)  # (a damaged lock file is left as it is, for the user to judge)
        raise
    try:
        if previous.get("pid") not in (None, os.getpid()):
            gone = previous.get("host") == host and not _alive(previous["pid"])
            log.warning(
                "[%s] took over the lock of %s on %s (%s)",
                lock.name,
                _describe(previous),
                lock.target,
                "that process is gone" if gone else "it holds no lock",
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, jsonio.dumps({"pid": os.getpid(), "host": host}).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock.path)
        os.close(fd)


@contextlib.contextmanager
def run_lock(out: Path, name: str = "run", wait: bool = False) -> Iterator[None]:
    """Hold out/train.lock for the block (creating `out`); RunLocked if another process holds it,
    or with `wait` wait until it ends. The file is removed when the block ends."""
    out.mkdir(parents=True, exist_ok=True)
    lock = Lock(
        out / LOCK_NAME, f"run directory {out}", "train", "the run's lock file", name, " (--wait)"
    )
    with hold(lock, wait):
        yield


def export_lock_path(out: Path) -> Path:
    """The lock file of exports into `out`: beside it (`out` itself is moved into place whole)."""
    return out.with_name(f".{out.name}{EXPORT_LOCK_SUFFIX}")


@contextlib.contextmanager
def export_lock(out: Path, command: str = "export-hf") -> Iterator[None]:
    """Hold the lock of exports into `out` (export_lock_path) for the block: a second export into
    the same directory is refused (RunLocked) while one runs, as a second training of one run is."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = Lock(export_lock_path(out), f"--out {out}", command, "the export's lock file", command)
    with hold(lock):
        yield
