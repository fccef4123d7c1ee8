"""A run's metrics record, metrics.jsonl: one JSON object a line, each with an integer "step".

While a run trains, the record is kept by the run (MetricsLog) and mirrored to the file. A write
that finds the file deleted, replaced or of another size (a user's rm, Snakemake cleaning up after
another invocation's job), and a checkpoint or the end that finds other bytes in it, first puts
the whole record back, with a warning, so the record cannot vanish; a failed write (a full disk)
is an error naming the file.

Each checkpoint keeps a copy of the record up to its step, with its sha256 and number of lines in
state.json; a resume restores the record from it (restore_metrics), and says so when the record
is incomplete or gone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from ..runtime import jsonio
from ..runtime.atomic import atomic_write_bytes
from ..runtime.links import own_opener

log = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
NO_LINK = own_opener("the run's metrics.jsonl")  # appended to, never through a symbolic link


class MetricsLog:
    """metrics.jsonl open for appending (see the module docstring); `name` labels the warnings.

    The record is also kept in memory (a line a logged step: megabytes at most), so it survives
    the path being deleted, replaced, cut short or written over in place."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name
        self.data = bytearray(path.read_bytes()) if path.exists() else bytearray()
        self.file = open(path, "ab", opener=NO_LINK)  # noqa: SIM115 (open for the whole run; closed by close)

    def write(self, record: dict) -> None:
        """Append `record` as one line, and flush it."""
        self.keep()
        line = (jsonio.dumps(record) + "\n").encode()
        try:
            self.file.write(line)
            self.file.flush()
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(self.path)) from None  # name the file
        self.data += line

    def content(self) -> bytes:
        """Every byte of the record so far."""
        return bytes(self.data)

    def records(self) -> list[dict]:
        """Every record so far (the run's own lines: each whole)."""
        return [json.loads(line) for line in self.data.decode().splitlines() if line.strip()]

    def keep(self, whole: bool = False) -> None:
        """Put the record back at its path if the path no longer holds it: another file (or none)
        there, or one of another size; with `whole`, also one of other bytes."""
        own = os.fstat(self.file.fileno())
        try:
            here = os.stat(self.path)
            if (here.st_dev, here.st_ino, here.st_size) == (own.st_dev, own.st_ino, len(self.data)):
                if not whole or self.path.read_bytes() == self.data:
                    return
        except FileNotFoundError:
            pass
        atomic_write_bytes(self.path, bytes(self.data))
        self.file.close()
        self.file = open(self.path, "ab", opener=NO_LINK)  # noqa: SIM115
        log.warning(
            "[%s] %s was deleted or changed while the run was training: put back (%d lines)",
            self.name,
            self.path,
            self.data.count(b"\n"),
        )

    def close(self) -> None:
        self.file.close()


def record_lines(path: Path) -> list[tuple[int, str]]:
    """(step, line) of each record of a metrics file. A torn last line (a crash or a full disk
    mid-write) is dropped, said once; a broken line elsewhere is an error naming the file and line."""
    lines = jsonio.read_text(path).split("\n")
    kept = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("not a record with an integer 'step'")
        except ValueError as e:
            if i == len(lines):  # no newline after it: the write was cut short
                log.warning("%s: dropped its torn last line %d (%r...)", path, i, line[:40])
                break
            raise ValueError(
                f"{path} line {i} is not a metrics record ({e}): delete that line or the file"
            ) from None
        kept.append((record["step"], line))
    return kept


def read_records(path: Path) -> list[dict]:
    """The records of a metrics file (see record_lines for a torn or broken line)."""
    return [json.loads(line) for _, line in record_lines(path)]


def encode_lines(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def restore_metrics(
    path: Path, ckpt: Path, step: int, saved: dict | None = None, name: str = "run"
) -> int | None:
    """Make `path` the record up to `step`: the copy saved with the checkpoint `ckpt` when there
    is one (verified against `saved`, the sha256 and line count state.json recorded for it), else
    the live file cut after `step`. Returns how many records were restored when the live file was
    missing or short, else None. A record with lines missing, or none at all, is said in a warning.
    """
    copy = ckpt / METRICS
    if copy.is_file():
        data = copy.read_bytes()
        if saved is not None and saved.get("sha256") != _sha256(data):
            raise ValueError(
                f"{copy} does not match the sha256 in {ckpt / 'state.json'}: the checkpoint's copy "
                f"of the record is damaged; delete it to resume with {path} as it is"
            )
        lines = [line for s, line in record_lines(copy) if s <= step]
        try:
            live = sum(s <= step for s, _ in record_lines(path)) if path.exists() else 0
        except ValueError:
            live = 0  # a broken line: the saved copy replaces it
        atomic_write_bytes(path, encode_lines(lines))
        return len(lines) if live < len(lines) else None
    keep = [line for s, line in record_lines(path) if s <= step] if path.exists() else []
    atomic_write_bytes(path, encode_lines(keep))
    expected = saved.get("records") if saved is not None else None
    if not keep and step > 0:
        log.warning(
            "[%s] resumed from step %d with no record of the steps before it: %s and the "
            "checkpoint's copy are gone, so the record starts after step %d",
            name,
            step,
            path,
            step,
        )
    elif isinstance(expected, int) and len(keep) < expected:
        log.warning(
            "[%s] resumed from step %d with %d of the %d records before it: the checkpoint's "
            "copy of %s is gone and the live file is short",
            name,
            step,
            len(keep),
            expected,
            path.name,
        )
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
