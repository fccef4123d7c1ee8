"""One writer per run directory: an advisory lock (flock) on out/train.lock, which records the
owner's pid and host. A second writer is refused with the owner's name, or (`wait`) waits for the
owner to end; a lock file left by a killed process holds no lock (the kernel dropped it with the
process) and is taken over.

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
from pathlib import Path

from ..runtime import bookkeeping, jsonio

log = logging.getLogger(__name__)

LOCK_NAME = "train.lock"
WAIT_ENV = "TAPERNORM_TRAIN_WAIT"  # when set (not 0), `tapernorm train` waits: the workflow sets it


class RunLocked(RuntimeError):
    """Another process is writing the run directory."""


class LockFileError(RuntimeError):
    """The lock file's path holds something that is not a lock file (a directory, ...)."""


def _open_lock(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except (IsADirectoryError, NotADirectoryError, PermissionError) as e:
        raise LockFileError(
            f"{path}, the run's lock file, cannot be opened ({e.strerror}): if no tapernorm train "
            "is writing the run, remove it (it is only the lock) and run the command again"
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


def _acquire(fd: int, out: Path, name: str, wait: bool) -> None:
    """flock `fd`; if another process holds it: RunLocked, or with `wait` block until it ends."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
    owner = _owner(fd, out / LOCK_NAME)
    if not wait:
        raise RunLocked(
            f"run directory {out} is being written by another tapernorm train "
            f"({_describe(owner)}, {out / LOCK_NAME}): wait for it to end (--wait) or use "
            "another --out"
        )
    log.info("[%s] waiting for %s, which is writing %s", name, _describe(owner), out)
    fcntl.flock(fd, fcntl.LOCK_EX)


@contextlib.contextmanager
def run_lock(out: Path, name: str = "run", wait: bool = False) -> Iterator[None]:
    """Hold out/train.lock for the block (creating `out`); RunLocked if another process holds it,
    or with `wait` wait until it ends. The file is removed when the block ends."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    while True:
        fd = _open_lock(path)
        try:
            _acquire(fd, out, name, wait)
        except BaseException:
            os.close(fd)
            raise
        # The previous owner may have removed the file between our open and our flock: then the
        # lock we hold is on a file nobody else sees; open the path again.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        previous, host = _owner(fd, path), socket.gethostname()
    except BaseException:
        os.close(fd)  # (a damaged lock file is left as it is, for the user to judge)
        raise
    try:
        if previous.get("pid") not in (None, os.getpid()):
            gone = previous.get("host") == host and not _alive(previous["pid"])
            log.warning(
                "[%s] took over the lock of %s in %s (%s)",
                name,
                _describe(previous),
                out,
                "that process is gone" if gone else "it holds no lock",
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, jsonio.dumps({"pid": os.getpid(), "host": host}).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)
