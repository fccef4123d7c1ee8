"""Where a command may write: never over what this project did not write.

A command writing into a directory the user names (`--out DIR`) first calls claim_dir: DIR is used
when it is absent, empty, or recognisably the command's own earlier output (a marker file the
command writes, a run's identity); else the command stops with one line naming DIR, what is in
the way and what to do. `--force` lets it write into such a directory all the same, replacing only
files of the names it writes; nothing else in DIR is touched. refuse_inside refuses an output
equal to or inside one of the command's inputs. install_dir moves a directory written aside into
place file by file, so that files the command did not write stay where they are.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from . import jsonio

SHOWN = 4  # entries named in a refusal


class PathInUse(Exception):
    """A path the user named holds what the command did not write (or is one of its inputs)."""


def _shown(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def refuse_inside(
    out: Path, inputs: Mapping[str, str | Path | None], option: str = "--out"
) -> None:
    """PathInUse if `out` is, or lies inside, one of `inputs` ({what it is: path}) that exists."""
    target = Path(out).resolve()
    for label, path in inputs.items():
        if path is None or not Path(path).exists():
            continue
        source = Path(path).resolve()
        if target == source or source in target.parents:
            where = "is" if target == source else "lies inside"
            raise PathInUse(
                f"{option} {out} {where} the {label} {path}, which the command reads: give "
                f"{option} a path outside {path}"
            )


def claim_dir(
    out: Path,
    command: str,
    is_own: Callable[[Path], bool],
    force: bool = False,
    option: str = "--out",
) -> None:
    """Let `command` write into directory `out`: absent, empty, its own earlier output (`is_own`)
    or `force`; else PathInUse naming what is in the way and what to do."""
    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise PathInUse(f"{option} {out} is a file, not a directory: give a new or empty directory")
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    if not entries or force or is_own(out):
        return
    raise PathInUse(
        f"{option} {out} holds files tapernorm {command} did not write ({_shown(entries)}): give "
        f"a new or empty directory, or add --force to write beside them (only files of the "
        f"names {command} writes are replaced)"
    )


def claim_file(
    out: Path, command: str, is_own: Callable[[Path], bool], force: bool = False
) -> None:
    """Let `command` replace file `out`: absent, its own earlier output or `force`."""
    out = Path(out)
    if out.is_dir():
        raise PathInUse(f"--out {out} is a directory: give a file name")
    if not out.exists() or force or is_own(out):
        return
    raise PathInUse(
        f"--out {out} exists and is not an earlier output of tapernorm {command}: give another "
        "file name, or add --force to replace it"
    )


def json_with(path: Path, keys: Iterable[str]) -> bool:
    """Whether `path` is a JSON object with every key of `keys` (how a command knows its files)."""
    try:
        data = jsonio.read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(k in data for k in keys)


def only_names(out: Path, own: Callable[[str], bool]) -> bool:
    """Whether every entry of directory `out` has a name `own` accepts."""
    return all(own(p.name) for p in Path(out).iterdir())


def is_temporary(name: str) -> bool:
    """A temporary of an interrupted atomic write (atomic.py) or of make_aside."""
    return name.startswith(".") and name.endswith(".tmp")


def make_aside(out: Path) -> Path:
    """A new, empty, uniquely named directory `.<name>.<random>.tmp` beside `out` to write the
    output into first, with the mode a plain mkdir gives (umask applied; mkdtemp's is 0o700)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = out.with_name(f".{out.name}.{secrets.token_hex(4)}.tmp")
        try:
            tmp.mkdir()
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no unused temporary name beside {out}")


def install_dir(tmp: Path, out: Path, own: Callable[[str], bool], last: str) -> None:
    """Move what `tmp` holds into `out` (`last`, the file whose presence says the output is
    whole, removed first and moved last), removing the files of `out` whose names `own` accepts
    and `tmp` lacks (an earlier output's); every other file of `out` stays. Removes `tmp`."""
    if not out.exists():
        tmp.rename(out)
        return
    (out / last).unlink(missing_ok=True)
    new = {p.name for p in tmp.iterdir()}
    for old in out.iterdir():
        if own(old.name) and old.name not in new:
            _remove(old)
    for name in sorted(new - {last}) + ([last] if last in new else []):
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(tmp / name, target)
    tmp.rmdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
