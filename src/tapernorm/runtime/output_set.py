"""Output sets: the files one command writes together (a table's .csv/.md/.tex/.html, a figure's
.pdf/.png/.html, the claims, a study's summaries), written as one set and read back only whole.

Beside its members a set has a marker, `<name>.set.json`: the command that wrote it, each member's
sha256 and one stamp (the sha256 of those hashes, so the same content gives the same marker). A
set is written (OutputSet.commit) in four steps:

1. every member and the new marker are written into a hidden staging directory beside them,
   `.<name>.set.json.<8 hex>.staging/`;
2. the old marker is removed;
3. the members are renamed into place, one by one;
4. the new marker is renamed into place, then the staging directory is removed.

A crash in step 1 leaves the old set as it was, whole, with its marker (the staging directory is
removed by the next write of the set). A crash in steps 2-4 leaves no marker and the staging
directory: check_set calls the set incomplete, and a workflow that declares the marker as an output
reruns the command (a declared output is missing). A member changed by hand, or by a command killed
outside this module, no longer matches the marker's hash: incomplete as well. A set without a marker
and without a staging directory was written before sets had markers, and is read as it is.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
from pathlib import Path

from . import bookkeeping
from .atomic import atomic_write_bytes
from .jsonio import json_bytes

MARKER_SUFFIX = ".set.json"
_STAGING = re.compile(r"^\.(?P<marker>.+\.set\.json)\.[0-9a-f]{8}\.staging$")


class IncompleteSet(ValueError):
    """An output set whose members are not the ones its marker names (a write stopped between
    files, or a member replaced by hand)."""


def marker_path(stem: str | Path) -> Path:
    """The marker of the set whose members are <stem>.<suffix> (or the files of a directory's
    summary, stem `dir/summary`): <stem>.set.json."""
    stem = Path(stem)
    return stem.with_name(stem.name + MARKER_SUFFIX)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def set_stamp(members: dict[str, str]) -> str:
    """The set's stamp: the sha256 of its members' names and hashes (sorted), 16 hex digits."""
    text = "\n".join(f"{name} {digest}" for name, digest in sorted(members.items()))
    return sha256(text.encode())[:16]


def read_marker(path: Path) -> dict | None:
    """The record of the marker `path` (bookkeeping.SET_MARKER), or None where it cannot be read
    as one (missing, damaged, or another file)."""
    try:
        return bookkeeping.read(bookkeeping.SET_MARKER, path)
    except (OSError, bookkeeping.BookkeepingError):
        return None


def is_marker(path: Path) -> bool:
    """Whether `path` is an output set's marker."""
    return read_marker(path) is not None


def _stagings(marker: Path) -> list[Path]:
    """The staging directories of `marker`'s set beside it (left by a write that stopped)."""
    try:
        entries = list(marker.parent.iterdir())
    except OSError:
        return []
    return [
        p
        for p in entries
        if (m := _STAGING.match(p.name)) and m["marker"] == marker.name and p.is_dir()
    ]


class OutputSet:
    """The members of one set, held in memory until commit() writes them as a set.

        out = OutputSet(marker_path(stem), "tapernorm table")
        out.add(stem.with_suffix(".csv"), csv_bytes)
        ...
        out.commit()

    Every member lies in the marker's directory (a rename moves it in, on one file system)."""

    def __init__(self, marker: str | Path, command: str):
        self.marker = Path(marker)
        if not self.marker.name.endswith(MARKER_SUFFIX):
            raise ValueError(f"an output set's marker ends in {MARKER_SUFFIX}: {self.marker}")
        self.command = command
        self.members: dict[Path, bytes] = {}

    def add(self, path: str | Path, data: bytes) -> Path:
        """Hold `data` as the member `path`; returns `path`."""
        path = Path(path)
        if path.parent != self.marker.parent:
            raise ValueError(f"{path} is not in the directory of its set's marker {self.marker}")
        if path == self.marker:
            raise ValueError(f"{path} is the set's marker, not a member")
        self.members[path] = bytes(data)
        return path

    def record(self) -> dict:
        """The marker's content."""
        members = {p.name: sha256(d) for p, d in sorted(self.members.items())}
        return {
            "output_set": self.marker.name.removesuffix(MARKER_SUFFIX),
            "command": self.command,
            "stamp": set_stamp(members),
            "members": members,
        }

    def commit(self) -> list[Path]:
        """Write the members and the marker as a set (the module's steps 1-4); returns the members'
        paths in the order they were added."""
        if not self.members:
            raise ValueError(f"the output set {self.marker} has no members")
        directory = self.marker.parent
        directory.mkdir(parents=True, exist_ok=True)
        if self.marker.is_symlink() or (self.marker.exists() and not is_marker(self.marker)):
            raise IncompleteSet(
                f"{self.marker} exists and is not an output set's marker: move it away and rerun "
                f"{self.command}"
            )
        names = {p.name for p in self.members} | {self.marker.name}
        for stale in _stagings(self.marker):
            if all(f.is_file() and _staged_name(f.name) in names for f in stale.iterdir()):
                shutil.rmtree(stale)  # a staging directory of this set that a write left
        staging = directory / f".{self.marker.name}.{secrets.token_hex(4)}.staging"
        staging.mkdir()
        try:
            for path, data in self.members.items():  # step 1
                atomic_write_bytes(staging / path.name, data)
            atomic_write_bytes(staging / self.marker.name, json_bytes(self.record()))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.marker.unlink(missing_ok=True)  # step 2
        for path in self.members:  # step 3
            _move(staging / path.name, path)
        _move(staging / self.marker.name, self.marker)  # step 4
        staging.rmdir()
        return list(self.members)


def _staged_name(name: str) -> str:
    """The member a staged file is: itself, or the one whose atomic write left `.<name>.<8 hex>.tmp`
    (atomic.py's temporary, when the process was killed inside it)."""
    m = re.fullmatch(r"\.(.+)\.[0-9a-f]{8}\.tmp", name)
    return m[1] if m else name


def _move(source: Path, target: Path) -> None:
    os.replace(source, target)


def set_problems(marker: str | Path) -> list[str]:
    """What makes `marker`'s set incomplete: each member missing or not the one the marker names,
    or the write that stopped (no marker, its staging directory left); [] for a whole set, or
    for a set without marker or staging directory (written before sets had markers)."""
    marker = Path(marker)
    if not marker.exists():
        if _stagings(marker):
            return ["its write stopped before it ended (no marker, a staging directory left)"]
        return []
    record = read_marker(marker)
    if record is None:
        return ["its marker is not an output set's marker (damaged, or another file)"]
    problems = []
    for name, digest in record["members"].items():
        path = marker.parent / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            problems.append(f"{name} missing")
            continue
        except OSError as e:
            problems.append(f"{name} unreadable ({e.strerror})")
            continue
        if sha256(data) != digest:
            problems.append(f"{name} is not the set's (its sha256 differs from the marker's)")
    return problems


def command_of(marker: Path) -> str:
    """The command that wrote `marker`'s set (from the marker, or a staged one)."""
    for candidate in [marker, *(s / marker.name for s in _stagings(marker))]:
        if (record := read_marker(candidate)) is not None:
            return record["command"]
    return "the command that wrote it"


def check_set(marker: str | Path) -> None:
    """IncompleteSet (one line: which members, which command to rerun) unless `marker`'s set is
    whole (or has no marker and no staging directory: an older set)."""
    marker = Path(marker)
    problems = set_problems(marker)
    if problems:
        raise IncompleteSet(
            f"{marker}: the output set is incomplete: {'; '.join(problems)}: rerun "
            f"{command_of(marker)} to write it again"
        )


def _marker_names(member: Path) -> list[str]:
    """The markers `member` may belong to, longest stem first: a.b.csv -> a.b.set.json, a.set.json."""
    parts = member.name.split(".")
    return [".".join(parts[:i]) + MARKER_SUFFIX for i in range(len(parts) - 1, 0, -1)]


def marker_of(member: str | Path) -> Path | None:
    """The marker of the set `member` belongs to: a `<stem>.set.json` beside it naming it, or one
    whose staging directory (a write that stopped) holds it, or its own stem's marker that cannot
    be read as one (damaged); None if there is none. Opens the markers of its own name's stems
    (a.b.csv: a.b.set.json, a.set.json), the others beside it only where those are absent."""
    found = _find_marker(Path(member))
    return None if found is None else found[0]


def _find_marker(member: Path) -> tuple[Path, dict | None] | None:
    """marker_of's marker and the record it read there (None: damaged, or not written: a staged
    set's marker, which check_member reports as a stopped write)."""
    names = _marker_names(member)
    try:
        entries = sorted(member.parent.iterdir())
    except OSError:
        return None
    # its own stems' markers first; the others beside it (a member such as the scaling summary's
    # per_seed.csv, in summary.set.json) only where none of those is there
    others = [p.name for p in entries if p.name.endswith(MARKER_SUFFIX) and p.name not in names]
    own = [n for n in names if member.with_name(n).is_file()]
    for name in own or others:
        path = member.with_name(name)
        record = read_marker(path) if path.exists() else None
        if record is None and name in own:
            return path, None  # its own stem's marker, damaged: check_member says so
        if record is not None and member.name in record["members"]:
            return path, record
    for p in entries:
        m = _STAGING.match(p.name)
        if m is None or (member.parent / m["marker"]).exists():
            continue
        staged = read_marker(p / m["marker"])  # a write stopped after step 1: the new marker
        if staged is not None and member.name in staged["members"]:  # is in its staging directory
            return p.parent / m["marker"], None
    return None


def check_member(member: str | Path) -> Path:
    """`member`, or IncompleteSet (one line) where it belongs to a set (marker_of) that a write
    left without its marker, or whose marker names another content for it: what a reader of a
    member calls before it reads it. It reads the member and its marker only (check_set reads the
    whole set); a reader of two members checks each."""
    member = Path(member)
    found = _find_marker(member)
    if found is None:
        return member
    marker, record = found
    if not marker.exists():
        problem = "its write stopped before it ended (no marker, a staging directory left)"
    else:
        try:
            digest = None if record is None else record["members"].get(member.name)
            data = member.read_bytes()
        except OSError as e:
            problem = f"{member.name} cannot be read ({e.strerror})"
        else:
            if digest is None:
                problem = f"{member.name} cannot be checked against the marker (damaged)"
            elif sha256(data) == digest:
                return member
            else:
                problem = f"{member.name} is not the set's (its sha256 differs from the marker's)"
    raise IncompleteSet(
        f"{marker}: the output set is incomplete: {problem}: rerun {command_of(marker)} to write "
        "it again"
    )
