"""Content digests (sha256) of the files a run reads and writes, and the file state that says
whether a file may have changed since it was hashed. No torch: the workflow imports this.

`tensors_sha256` digests a safetensors file by what it holds (each tensor's name, dtype, shape and
bytes), not by its free-form `__metadata__`: that is where save_tensors writes the digest itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """sha256 of the bytes of `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def json_sha256(obj) -> str:
    """sha256 of `obj` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def safetensors_header(f) -> tuple[dict, int]:
    """(header, header length + 8) of the safetensors file open as `f` (positioned at 0);
    ValueError if it has none."""
    prefix = f.read(8)
    size = os.fstat(f.fileno()).st_size
    n = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
    if not 0 < n <= size - 8:
        raise ValueError("no safetensors header (the file is truncated or not safetensors)")
    try:
        header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"its safetensors header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError("its safetensors header is not a JSON object")
    return header, 8 + n


def tensors_sha256(path: str | Path) -> str:
    """sha256 of the tensors in a safetensors file: its header without `__metadata__`, as
    canonical JSON, then every byte after the header. ValueError if it is not safetensors."""
    with open(path, "rb") as f:
        header, _ = safetensors_header(f)
        header.pop("__metadata__", None)
        digest = hashlib.sha256(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_state(path: str | Path) -> list[int] | None:
    """[device, inode, size, mtime_ns, ctime_ns] of `path` (None if it is missing). Any write to
    the file, or a file put in its place, changes it: ctime cannot be set back."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
