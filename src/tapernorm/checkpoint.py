"""Models and training state as safetensors + JSON (no pickles), written atomically."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic import atomic_path, atomic_write_bytes  # atomic_write_bytes: callers import it here
from .model import GPT, GPTConfig


class CheckpointError(RuntimeError):
    """A missing, truncated or inconsistent checkpoint."""


def write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON (truncated?): {e}") from e


def run_summary(model_dir: str | Path) -> dict:
    """Name, labels and outcome of the run a model directory holds (from config.json, eval.json);
    the labels without the run's provenance (its host and times)."""
    model_dir = Path(model_dir)
    cfg = read_json(model_dir / "config.json")
    labels = {k: v for k, v in cfg.get("meta", {}).items() if k != "provenance"}
    summary = {"name": cfg.get("name"), "meta": labels, "taper": cfg["model"]["taper"]}
    if (model_dir / "eval.json").is_file():
        outcome = read_json(model_dir / "eval.json")
        summary.update({k: outcome.get(k) for k in ("steps", "weights_step", "diverged")})
    return summary


def save_tensors(path: str | Path, tensors: dict[str, torch.Tensor]) -> None:
    with atomic_path(path) as tmp:
        try:
            save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, tmp)
        except SafetensorError as e:  # e.g. a full disk: "IoError(Os { code: 28, ... })"
            raise CheckpointError(f"could not write {path}: {e} (is the disk full?)") from e


def load_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist")
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


def load_model_tensors(model: GPT, tensors: dict[str, torch.Tensor], where: str = "") -> None:
    if model.config.tie_embeddings:
        tensors = {**tensors, "lm_head.weight": tensors.get("tok_emb.weight")}
    missing = set(model.state_dict()) - set(tensors)
    unexpected = set(tensors) - set(model.state_dict())
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {where} does not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    model.load_state_dict(tensors)


def save_model(model: GPT, out_dir: str | Path, config_extra: dict | None = None) -> None:
    """out_dir/model.safetensors and out_dir/config.json ({"model": GPTConfig, **config_extra})."""
    out_dir = Path(out_dir)
    save_tensors(out_dir / "model.safetensors", model_tensors(model))
    write_json(out_dir / "config.json", {**(config_extra or {}), "model": model.config.to_dict()})


def load_model(model_dir: str | Path, device: str | torch.device = "cpu") -> GPT:
    """A GPT from a directory holding config.json (with a "model" entry) and model.safetensors."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model directory {model_dir} does not exist")
    config = read_json(model_dir / "config.json")
    if "model" not in config:
        raise CheckpointError(f"{model_dir / 'config.json'} has no 'model' entry")
    try:
        model = GPT(GPTConfig.from_dict(config["model"]))
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{model_dir / 'config.json'}: invalid 'model' entry: {e}") from e
    load_model_tensors(model, load_tensors(model_dir / "model.safetensors"), str(model_dir))
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
