"""What made a run, by content: its resolved config, the data it reads, the model it starts from.

A run directory's checkpoint records the identity it was trained under (state.json); a rerun
resumes from it only when all three parts match. Each part is compared by what it holds, so the
same data or init named another way (`./data` for `data`, an absolute path, a moved or copied
directory of the same bytes) is the same run:

- config: the resolved run config without `data.dir` and `init.from` (the paths: what they hold
  is the next two parts) and `log.tensorboard` (whether a TensorBoard view of the record is
  written);
- data: the sha256 of the shards (meta.json, train.bin, val.bin) and of the tokenizer model that
  meta.json names;
- init: for a trunk (`init.trunk`), the digest of its checkpoint's tensors and its copy of the
  record; for a run or model directory, its config.json's "model" entry and the digest of the
  tensors in its model.safetensors (not the files' bytes: config.json's provenance and times
  change whenever the same model is written again); for a save_pretrained directory, its
  config.json without transformers' version and source name and each weight file's digest; a hub
  id by name.

The inputs are pinned for the whole run (Inputs): hashed when it starts, checked at every
checkpoint and at the end; one that changed stops the run (InputChanged, naming the file). A file
whose device, inode, size, mtime and ctime are those it had when it was hashed (at the start, or
as the checkpoint a resume reads recorded them) has not been written since and is not read again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from ..config.run import RunConfig, optional_keys
from ..runtime import bookkeeping
from ..runtime.digests import file_sha256, file_state, tensors_sha256
from ..runtime.jsonio import read_json

SHARD_FILES = ("meta.json", "train.bin", "val.bin")
MODEL_FILES = ("config.json", "model.safetensors")  # what checkpoint.load_model reads
PARTS = {"config": "another config", "data": "other data", "init": "another init checkpoint"}
PATH_KEYS = (
    ("data", "dir"),
    ("init", "from"),
    ("init", "trunk"),
)  # identified by what they hold, not their spelling
VIEW_KEYS = (("log", "tensorboard"),)  # how a run is watched, not what it computes
HF_VOLATILE = ("_name_or_path", "transformers_version")  # in config.json, not the model
HF_WEIGHTS = (".safetensors", ".bin", ".index.json")


class InputChanged(RuntimeError):
    """A file the run reads changed while it was training."""


def config_identity(cfg: dict) -> dict:
    """The run config (RunConfig.to_dict's) as its identity compares it: without the paths of
    PATH_KEYS and the views of VIEW_KEYS (a run is the same with or without its TensorBoard log),
    and without the optional keys that are null (an older record's spelling of absent)."""
    cfg = copy.deepcopy(cfg)
    for section, key in PATH_KEYS + VIEW_KEYS:
        if isinstance(cfg.get(section), dict):
            cfg[section].pop(key, None)
    for *sections, key in optional_keys():
        node = cfg.get(sections[0]) if sections else cfg
        if isinstance(node, dict) and key in node and node[key] is None:
            del node[key]
    return cfg


def _json(path: Path, kind: bookkeeping.Kind | None = None) -> dict | None:
    """The JSON object in `path`, checked as `kind` (a bookkeeping file) where given; None if it is
    missing, unreadable, not JSON, not an object or not of its kind: the identity is then of its
    bytes, and the file's own reader (TokenShards, model_config) says what is wrong in one line."""
    try:
        obj = read_json(path) if kind is None else bookkeeping.read(kind, path)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def fingerprint(kind: str, path: Path) -> dict | None:
    """What a file holds, as its identity records it (None if it is missing):
    bytes: its sha256; tensors: the digest of a safetensors file's tensors; model: the "model"
    entry of a config.json; hf_config: a transformers config.json without HF_VOLATILE."""
    if not path.is_file():
        return None
    if kind == "bytes":
        return {"sha256": file_sha256(path)}
    if kind == "tensors":
        try:
            return {"tensors_sha256": tensors_sha256(path)}
        except ValueError:
            return {"sha256": file_sha256(path)}  # not safetensors: loading it will say so
    config = _json(path, bookkeeping.MODEL_CONFIG if kind == "model" else None)
    if config is None:
        return {"sha256": file_sha256(path)}  # not a JSON object: loading it will say so
    if kind == "model":
        return {"model": config.get("model")}
    return {"config": {k: v for k, v in config.items() if k not in HF_VOLATILE}}


@dataclass
class Pin:
    """One input file: which part of the identity it belongs to, under what name, how it is
    fingerprinted, and its file state and fingerprint when it was last hashed."""

    part: str  # data | init
    name: str
    path: Path
    kind: str  # see fingerprint
    state: list[int] | None = None
    value: dict | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.path.resolve()}"


def _data_pins(data_dir: Path) -> list[Pin]:
    pins = [Pin("data", name, data_dir / name, "bytes") for name in SHARD_FILES]
    tokenizer = (_json(data_dir / "meta.json", bookkeeping.SHARDS_META) or {}).get("tokenizer")
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    if isinstance(model, str):  # a relative model path is relative to the shards (load_tokenizer)
        pins.append(Pin("data", "tokenizer", data_dir / model, "bytes"))
    return pins


def data_fingerprint(data_dir: str | Path) -> dict:
    """The data part of the identity of a run on the shards in `data_dir`."""
    return {pin.name: fingerprint(pin.kind, pin.path) for pin in _data_pins(Path(data_dir))}


def _init_pins(source: str | None) -> tuple[list[Pin], dict | None]:
    """The pins of `init.from`, and the init identity of a source that has no files to pin."""
    if source is None:
        return [], None
    path = Path(source[3:] if source.startswith("hf:") else source)
    if source.startswith("hf:") and not path.is_dir():
        return [], {"hub": source[3:]}
    if not path.is_dir():
        return [], {"missing": True}  # (set_up's build_model says so)
    if not source.startswith("hf:"):
        config, weights = (path / name for name in MODEL_FILES)
        return [
            Pin("init", config.name, config, "model"),
            Pin("init", weights.name, weights, "tensors"),
        ], None
    files = sorted(p for p in path.iterdir() if p.is_file())
    pins = [Pin("init", "config.json", path / "config.json", "hf_config")]
    for p in files:
        if p.name.endswith(HF_WEIGHTS):
            kind = "tensors" if p.suffix == ".safetensors" else "bytes"
            pins.append(Pin("init", p.name, p, kind))
    return pins, None


def _trunk_pins(trunk: str | None) -> list[Pin]:
    """The pins of `init.trunk`: its checkpoint's tensors and copy of the record."""
    if trunk is None:
        return []
    ckpt = Path(trunk) / "ckpt"
    return [
        Pin("init", "trunk state.safetensors", ckpt / "state.safetensors", "tensors"),
        Pin("init", "trunk metrics.jsonl", ckpt / "metrics.jsonl", "bytes"),
    ]


def _hash(pin: Pin, known: dict) -> None:
    """Fill in pin.state and pin.value: from `known` (key -> [state, value]) when the file's state
    is the one recorded there, else by reading the file."""
    state = file_state(pin.path)
    recorded = known.get(pin.key)
    if state is not None and isinstance(recorded, list) and recorded[:1] == [state]:
        pin.state, pin.value = state, recorded[1]
        return
    pin.state, pin.value = state, fingerprint(pin.kind, pin.path)


class Inputs:
    """The data and init files of run config `cfg`, fingerprinted (pinned) when made.

    `known`: the file states and fingerprints a checkpoint recorded (Inputs.record), so that
    files not written since need not be read again."""

    def __init__(self, cfg: RunConfig, known: dict | None = None):
        self.pins = _data_pins(Path(cfg.data.dir))
        init_pins, self._init = _init_pins(cfg.init.source)
        self.pins += init_pins + _trunk_pins(cfg.init.trunk)
        for pin in self.pins:
            _hash(pin, known or {})
        self._check_tokenizer(Path(cfg.data.dir))

    def _check_tokenizer(self, data_dir: Path) -> None:
        """TokenizerChanged if the tokenizer model is not the one the shards' meta.json recorded
        (by its sha256: hashed with the data, so this reads nothing more)."""
        from ..data.tokenizers import check_tokenizer_file

        spec = (_json(data_dir / "meta.json", bookkeeping.SHARDS_META) or {}).get("tokenizer")
        for pin in self.pins:
            if pin.name == "tokenizer" and isinstance(pin.value, dict) and isinstance(spec, dict):
                check_tokenizer_file(pin.path, spec.get("sha256"), pin.value.get("sha256"))

    def part(self, part: str) -> dict | None:
        """The identity's `part` (data or init): {name: fingerprint}."""
        if part == "init" and self._init is not None:
            return self._init
        pins = [p for p in self.pins if p.part == part]
        if part == "init" and not pins:
            return None
        return {p.name: p.value for p in pins}

    def record(self) -> dict:
        """{key: [file state, fingerprint]} of every pin, for the checkpoint (`known`)."""
        return {p.key: [p.state, p.value] for p in self.pins}

    def check(self) -> None:
        """InputChanged, naming the first file whose content is not what it was when pinned."""
        for pin in self.pins:
            state = file_state(pin.path)
            if state == pin.state:
                continue
            value = fingerprint(pin.kind, pin.path)
            if value != pin.value:
                raise InputChanged(_changed(pin, value))
            pin.state = state  # rewritten with the same content (a copy, a re-saved model)


def _changed(pin: Pin, now: dict | None) -> str:
    what = {"model": "its 'model' entry", "hf_config": "its config"}.get(pin.kind, "its content")
    if now is None:
        happened = "was removed"
    elif pin.value is None:
        happened = "appeared"
    else:
        happened = f"changed ({what})"
    part = "data" if pin.part == "data" else "init model"
    return (
        f"{pin.path} ({part} of the run) {happened} while the run was training: stopped before "
        "writing anything more; put the file back as it was and rerun to resume from the last "
        "checkpoint, or rerun with it as it is now to start the run over"
    )


def data_sha256(inputs: Inputs) -> dict[str, str | None]:
    """{file: sha256} of the data part (meta.json, train.bin, val.bin, tokenizer; None: missing):
    written into config.json's meta.provenance, so that an aggregate can compare the data bytes
    of the runs it averages (analysis/comparable.py)."""
    part = inputs.part("data") or {}
    return {name: (value or {}).get("sha256") for name, value in part.items()}


def run_identity(cfg: RunConfig, inputs: Inputs | None = None) -> dict:
    """{"config": the run config's dict, "data": ..., "init": ...} (of `inputs`, pinned before,
    or fingerprinted now)."""
    inputs = inputs or Inputs(cfg)
    return {"config": cfg.to_dict(), "data": inputs.part("data"), "init": inputs.part("init")}


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
    ("another config (train.lr)", "other data (meta.json)"); empty when they match. Configs are
    compared by config_identity (without the paths)."""
    found = []
    for part, label in PARTS.items():
        if part not in recorded:
            found.append(f"{label} (not recorded)")
            continue
        old, new = recorded[part], current[part]
        if part == "config":
            old = config_identity(old) if isinstance(old, dict) else old
            new = config_identity(new)
        keys = _changed_keys(old, new, -1 if part == "config" else 1)
        if keys == ["<top level>"]:
            found.append(label)
        elif keys:
            shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            found.append(f"{label} ({shown})")
    return found
