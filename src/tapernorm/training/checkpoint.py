"""Models and training state as safetensors + JSON (no pickles), written atomically.

Every safetensors file written here carries the sha256 of its tensors in its header
(`__metadata__`, digests.tensors_sha256), and reading one verifies it: a file damaged after it was
written is an error naming it, never weights loaded silently wrong.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..model import GPT, GPTConfig
from ..runtime import bookkeeping, jsonio
from ..runtime.atomic import atomic_path
from ..runtime.digests import safetensors_header, tensors_sha256

DIGEST_KEY = "sha256"  # the key of the tensors' digest in a safetensors file's __metadata__
_PLACEHOLDER = "0" * 64


class CheckpointError(RuntimeError):
    """A missing, truncated or inconsistent checkpoint."""


def write_json(path: str | Path, obj) -> None:
    """`obj` as standard JSON (jsonio: no NaN or Infinity), replacing `path` atomically."""
    jsonio.write_json(path, obj)


def run_summary(model_dir: str | Path) -> dict:
    """Name, labels and outcome of the run a model directory holds (from config.json, eval.json);
    the labels without the run's provenance (its host and times). A damaged file of either is a
    BookkeepingError naming it (bookkeeping.MODEL_CONFIG, RUN_RESULT)."""
    model_dir = Path(model_dir)
    record = bookkeeping.read(bookkeeping.MODEL_CONFIG, model_dir / "config.json")
    labels = {k: v for k, v in record.get("meta", {}).items() if k != "provenance"}
    summary = {"name": record.get("name"), "meta": labels, "taper": record["model"].get("taper")}
    if (model_dir / "eval.json").is_file():
        outcome = bookkeeping.read(bookkeeping.RUN_RESULT, model_dir / "eval.json")
        keys = ("steps", "weights_step", "diverged", "diverged_step")
        summary.update({k: outcome.get(k) for k in keys})
    return summary


def save_tensors(path: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write `tensors` to `path` atomically, with their digest in the header."""
    with atomic_path(path) as tmp:
        try:
            tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
            save_file(tensors, tmp, metadata={DIGEST_KEY: _PLACEHOLDER})
        except SafetensorError as e:  # e.g. a full disk: "IoError(Os { code: 28, ... })"
            raise CheckpointError(f"could not write {path}: {e} (is the disk full?)") from e
        _write_digest(tmp)


def _write_digest(path: Path) -> None:
    """Put the digest of the tensors of `path` in place of the placeholder in its header (the same
    length, so nothing moves; the digest leaves __metadata__ out)."""
    digest = tensors_sha256(path)
    with open(path, "r+b") as f:
        _, end = safetensors_header(f)
        f.seek(0)
        head = f.read(end)
        at = head.index(f'"{DIGEST_KEY}":"{_PLACEHOLDER}"'.encode()) + len(DIGEST_KEY) + 4
        f.seek(at)
        f.write(digest.encode())


def verify_tensor_file(path: str | Path) -> None:
    """CheckpointError naming `path` unless it is a readable safetensors file whose tensors match
    the digest written with them (a file without one is only read)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    try:
        with safe_open(str(path), "pt") as f:
            recorded = (f.metadata() or {}).get(DIGEST_KEY)
        actual = tensors_sha256(path) if recorded is not None else None
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path} is unreadable (truncated?): {e}") from e
    if actual != recorded:
        raise CheckpointError(
            f"checkpoint file {path} is damaged: its tensors' sha256 is {actual[:12]}..., the one "
            f"written with it {recorded[:12]}...; restore it from a copy or rerun what wrote it"
        )


def load_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of `path`, verified against the digest in its header when it has one."""
    verify_tensor_file(path)
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path} is unreadable (truncated?): {e}") from e


def model_tensors(model: GPT) -> dict[str, torch.Tensor]:
    """The state dict without the tied head's duplicate of the embedding."""
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)
    return state


def check_shapes(model: GPT, shapes: dict[str, list[int]], where: str, against: str) -> None:
    """CheckpointError unless `shapes` ({name: shape} of the tensors in `where`) are exactly the
    model's (the tied head's duplicate aside); `against` names what the model was built from."""
    if model.config.tie_embeddings and "tok_emb.weight" in shapes:
        shapes = {**shapes, "lm_head.weight": shapes["tok_emb.weight"]}
    state = model.state_dict()
    missing = sorted(set(state) - set(shapes))
    unexpected = sorted(set(shapes) - set(state))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {where} does not match {against}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    for name, shape in shapes.items():
        if list(shape) != list(state[name].shape):
            raise CheckpointError(
                f"checkpoint {where} does not match {against}: {name} has shape {list(shape)}, "
                f"the model wants {list(state[name].shape)}"
            )


def load_model_tensors(model: GPT, tensors: dict[str, torch.Tensor], where: str = "") -> None:
    """Load `tensors` (read from `where`) into `model`, once their names and shapes match it."""
    check_shapes(model, {k: list(v.shape) for k, v in tensors.items()}, where, "the model")
    if model.config.tie_embeddings:
        tensors = {**tensors, "lm_head.weight": tensors["tok_emb.weight"]}
    model.load_state_dict(tensors)


def save_model(model: GPT, out_dir: str | Path, config_extra: dict | None = None) -> None:
    """out_dir/model.safetensors and out_dir/config.json ({"model": GPTConfig, **config_extra})."""
    out_dir = Path(out_dir)
    save_tensors(out_dir / "model.safetensors", model_tensors(model))
    write_json(out_dir / "config.json", {**(config_extra or {}), "model": model.config.to_dict()})


def model_config(model_dir: str | Path) -> GPTConfig:
    """The GPTConfig of the 'model' entry of model_dir/config.json: BookkeepingError naming it if
    the file is damaged or has no 'model' object, CheckpointError if that is not a GPTConfig."""
    path = Path(model_dir) / "config.json"
    config = bookkeeping.read(bookkeeping.MODEL_CONFIG, path)
    try:
        return GPTConfig.from_dict(config["model"])
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise CheckpointError(f"{path}: invalid 'model' entry: {e}") from e


def header_shapes(path: str | Path) -> dict[str, list[int]]:
    """{name: shape} of the tensors of a safetensors file, from its header alone."""
    try:
        with open(path, "rb") as f:
            header, _ = safetensors_header(f)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} does not exist") from None
    except ValueError as e:
        raise CheckpointError(f"checkpoint file {path} is unreadable: {e}") from None
    header.pop("__metadata__", None)
    try:
        return {name: list(entry["shape"]) for name, entry in header.items()}
    except (TypeError, KeyError) as e:
        raise CheckpointError(
            f"checkpoint file {path}: a header entry has no shape ({e})"
        ) from None


def load_model(model_dir: str | Path, device: str | torch.device = "cpu") -> GPT:
    """A GPT from a directory holding config.json (with a "model" entry) and model.safetensors.
    The weights' names and shapes are checked against the config before any memory is taken for
    them, and their digest when they are read."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model directory {model_dir} does not exist")
    config = model_config(model_dir)
    weights = model_dir / "model.safetensors"
    against = f"the 'model' entry of {model_dir / 'config.json'}"
    with torch.device("meta"):  # shapes only
        try:
            check_shapes(GPT(config), header_shapes(weights), str(weights), against)
        except CheckpointError as e:
            if not weights.is_file():
                raise
            raise CheckpointError(
                f"{e}: the weights and the config were not saved together; put back the "
                f"config.json saved with them, or give the directory of a whole model"
            ) from None
    model = GPT(config)
    load_model_tensors(model, load_tensors(weights), str(weights))
    return model.to(device)


def replace_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a fully written tmp_dir to final_dir, keeping the old one until the new one is in place.

    Two renames: a process killed between them leaves only final_dir.old (resume looks there); a
    failed second rename puts the old directory back.
    """
    old = final_dir.with_name(final_dir.name + ".old")
    moved = final_dir.exists()
    if moved:
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final_dir, old)
    try:
        os.replace(tmp_dir, final_dir)
    except BaseException:
        if moved:
            os.replace(old, final_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)
