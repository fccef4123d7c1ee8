"""Atomic file writes: write a temporary file beside the target, then rename it into place.

A reader sees the old file or the complete new one, never a partial write, and a failure leaves
neither a partial target nor a temporary file behind. The new file gets the mode a plain
`open(path, "w")` gives it (0o666 & ~umask, or what the directory's default ACL says).

    atomic_write_bytes(path, data)                # bytes in memory
    with atomic_open(path) as f: f.write(...)     # a binary handle, for streamed writers
    with atomic_path(path) as tmp: save(..., tmp) # a file name, for writers that want one
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def _create_temp(path: Path) -> Path:
    """Create an empty, unused `.<name>.<random>.tmp` beside `path` and return its name.

    tempfile.mkstemp would create it with mode 0o600 (private whatever the umask). Creating it with
    mode 0o666 lets the kernel apply the umask (and any default ACL) as for any new file, without
    reading the umask: os.umask can only be read by setting it, which races with other threads.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, flags, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no unused temporary name for {path}")


def plain_modes(directory: str | Path) -> None:
    """Give every file under `directory` the mode a plain `open(path, "w")` would (0o666 & ~umask,
    or the directory's default ACL): writers such as safetensors create theirs 0o600."""
    directory = Path(directory)
    probe = _create_temp(directory / "mode")
    try:
        mode = stat.S_IMODE(os.stat(probe).st_mode)
    finally:
        probe.unlink()
    for file in directory.rglob("*"):
        if file.is_file() and not file.is_symlink() and stat.S_IMODE(file.stat().st_mode) != mode:
            os.chmod(file, mode)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file name beside `path` (its directory created if need be) for the block to
    write; renamed onto `path` when the block ends normally, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_temp(path)
    mode = stat.S_IMODE(os.stat(tmp).st_mode)
    try:
        yield tmp
        # A writer may put its own file at tmp (safetensors writes and renames one, mode 0o600).
        if stat.S_IMODE(os.stat(tmp).st_mode) != mode:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno is not None and (e.filename is None or Path(e.filename) == tmp):
            raise OSError(e.errno, e.strerror, str(path)) from e  # name the target, not tmp
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces `path` when the block ends normally."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        yield f


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace `path` by a file holding `data`."""
    with atomic_open(path) as f:
        f.write(data)
