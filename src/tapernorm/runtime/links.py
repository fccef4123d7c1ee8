"""The project's own bookkeeping files (a run's lock, record and checkpoint, the GPU slot files)
are never opened through a symbolic link: a link where one of them should be is refused with one
line naming it, and its target is left as it is. The check of a path (`refuse_link`) is done
before anything is written; the opens themselves (`open_own`, `own_opener`) add O_NOFOLLOW, so a
link put there in between is refused too (the kernel answers ELOOP).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class LinkRefused(RuntimeError):
    """A path where the project keeps its own file is a symbolic link."""


def refusal(path: str | Path, what: str) -> LinkRefused:
    """The one-line error of `path` (`what`: the file it should be) being a symbolic link."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return LinkRefused(
        f"{path}, {what}, is a symbolic link{target}: tapernorm does not read or write its own "
        "files through a link; remove the link (its target is left as it is) and run the "
        "command again"
    )


def refuse_link(path: str | Path, what: str) -> None:
    """LinkRefused naming `path` if it is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise refusal(path, what)


def open_own(path: str | Path, flags: int, what: str, mode: int = 0o666) -> int:
    """os.open(path, flags | O_NOFOLLOW, mode); LinkRefused naming `path` if it is a link."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refusal(path, what) from None
        raise


def own_opener(what: str):
    """An `opener` for open() that does not follow a link at the path (see open_own)."""
    return lambda path, flags: open_own(path, flags, what)
