"""What made a run: its resolved config, a fingerprint of its data and one of its init checkpoint.

A run directory's checkpoint records the identity it was trained under (state.json); a rerun
resumes from it only when all three parts match, so a changed config, shards rewritten in place
under `data.dir` or a retrained `init.from` model start the run over instead of continuing it.

A file's fingerprint is its sha256 up to HASH_LIMIT bytes, its size and mtime beyond (hashing a
paper-scale shard on every start would take minutes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HASH_LIMIT = 256 << 20
SHARD_FILES = ("meta.json", "train.bin", "val.bin")
MODEL_FILES = ("config.json", "model.safetensors")  # what checkpoint.load_model reads
PARTS = {"config": "another config", "data": "other data", "init": "another init checkpoint"}


def file_fingerprint(path: Path) -> dict | None:
    """{"sha256": ...} or {"size": ..., "mtime_ns": ...} of a file; None if there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if not path.is_file():
        return None
    if st.st_size > HASH_LIMIT:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"sha256": digest.hexdigest()}


def data_fingerprint(data_dir: str | Path) -> dict:
    """The shards (meta.json, train.bin, val.bin) and the tokenizer file meta.json names."""
    data_dir = Path(data_dir)
    files = {name: file_fingerprint(data_dir / name) for name in SHARD_FILES}
    try:
        tokenizer = json.loads((data_dir / "meta.json").read_text()).get("tokenizer")
    except (OSError, ValueError, AttributeError):
        tokenizer = None
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    if isinstance(model, str):  # a relative model path is relative to the shards (load_tokenizer)
        files["tokenizer"] = file_fingerprint(data_dir / model)
    return files


def init_fingerprint(source: str | None) -> dict | None:
    """The files of the model `init.from` names (a run/model directory or `hf:` a local
    save_pretrained directory); a hub id is recorded by name (its files are the hub's)."""
    if source is None:
        return None
    path = Path(source[3:] if source.startswith("hf:") else source)
    if source.startswith("hf:") and not path.is_dir():
        return {"hub": source[3:]}
    if not path.is_dir():
        return {"missing": str(path)}
    if source.startswith("hf:"):
        return {p.name: file_fingerprint(p) for p in sorted(path.iterdir()) if p.is_file()}
    return {name: file_fingerprint(path / name) for name in MODEL_FILES}


def run_identity(cfg: dict) -> dict:
    """{"config": the resolved run config, "data": ..., "init": ...}."""
    return {
        "config": cfg,
        "data": data_fingerprint(cfg["data"]["dir"]),
        "init": init_fingerprint(cfg["init"]["from"]),
    }


def _changed_keys(old, new, depth: int, prefix: str = "") -> list[str]:
    """Dotted keys (at most `depth` deep) whose values differ between two nested dicts."""
    if depth == 0 or not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix or "<top level>"]
    keys = [*old, *(k for k in new if k not in old)]
    return [
        key
        for k in keys
        for key in _changed_keys(
            old.get(k), new.get(k), depth - 1, f"{prefix}.{k}" if prefix else str(k)
        )
    ]


def differences(recorded: dict, current: dict) -> list[str]:
    """What differs between the identity a checkpoint recorded and the current one, part by part
    ("another config (train.lr)", "other data (meta.json)"); empty when they match."""
    found = []
    for part, label in PARTS.items():
        if part not in recorded:
            found.append(f"{label} (not recorded)")
            continue
        keys = _changed_keys(recorded[part], current[part], -1 if part == "config" else 1)
        if keys == ["<top level>"]:
            found.append(label)
        elif keys:
            shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            found.append(f"{label} ({shown})")
    return found
