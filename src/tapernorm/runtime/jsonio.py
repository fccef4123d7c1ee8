"""The project's JSON and text files: written strictly, read naming the file.

Every JSON file and line tapernorm writes goes through `dumps`, which writes standard JSON (RFC
8259 has no NaN or Infinity). A float that is not finite is written as null and named, with what
it was, under "non_finite" in the object that holds it:

    dumps({"val_loss": float("nan"), "step": 3})
    -> {"val_loss": null, "step": 3, "non_finite": {"val_loss": "nan"}}

A value inside a list is named by its key and index ("betas.1"). Reading names the file in every
error: missing, not UTF-8 (with the line), not JSON (with the line and column).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .atomic import atomic_write_bytes

NON_FINITE = "non_finite"


class FileError(ValueError):
    """A file that is missing, not UTF-8 or not JSON; the message names it."""


def _spelled(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _finite(obj, path: str, found: list[tuple[str, str]]):
    """`obj` with every non-finite float None; each one's path (below the nearest object) and
    spelling appended to `found`, an object's own ones put under its NON_FINITE key."""
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append((path, _spelled(obj)))
        return None
    if isinstance(obj, dict):
        inner: list[tuple[str, str]] = []
        out = {k: _finite(v, str(k), inner) for k, v in obj.items()}
        if inner:
            out[NON_FINITE] = {**(out.get(NON_FINITE) or {}), **dict(inner)}
        return out
    if isinstance(obj, (list, tuple)):
        return [_finite(v, f"{path}.{i}", found) for i, v in enumerate(obj)]
    return obj


def finite(obj):
    """`obj` as it is written: non-finite floats null, named under NON_FINITE. A non-finite
    number outside any object (a bare number or list) has nowhere to be named: ValueError."""
    found: list[tuple[str, str]] = []
    out = _finite(obj, "<top level>", found)
    if found:
        raise ValueError(f"cannot write {found[0][1]} as JSON outside an object")
    return out


def dumps(obj, indent: int | None = None) -> str:
    """Standard JSON of `obj` (no NaN or Infinity tokens: see the module docstring)."""
    return json.dumps(finite(obj), indent=indent, allow_nan=False)


def json_bytes(obj) -> bytes:
    """`obj` as indented standard JSON with a final newline: the bytes write_json writes."""
    return (dumps(obj, indent=2) + "\n").encode()


def write_json(path: str | Path, obj) -> None:
    """Replace `path` by `obj` as indented standard JSON, atomically."""
    atomic_write_bytes(path, json_bytes(obj))


def _reject(token: str):
    raise ValueError(f"{token} is not a JSON number")


def loads_strict(text: str):
    """JSON by the standard: NaN, Infinity and -Infinity are errors (json.loads accepts them)."""
    return json.loads(text, parse_constant=_reject)


def read_text(path: str | Path) -> str:
    """The UTF-8 text of `path`; FileError naming it, with the line, if it is not UTF-8."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileError(f"{path} does not exist") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise FileError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}, column "
            f"{column}: {e.reason})"
        ) from None


def read_json(path: str | Path):
    """The JSON in `path`; FileError naming it if it is missing, not UTF-8 or not JSON."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise FileError(f"{path} is not a file")
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FileError(f"{path} is not valid JSON (truncated?): {e}") from None
