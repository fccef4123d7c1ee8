"""The training state a run checkpoints and resumes from: weights, AdamW moments, the scale
anchor's statistics and the step, as safetensors + JSON in out/ckpt (replaced atomically)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .anchor import ScaleAnchor
from .checkpoint import (
    CheckpointError,
    load_model_tensors,
    load_tensors,
    model_tensors,
    read_json,
    replace_dir,
    save_tensors,
    write_json,
)
from .model import GPT


def checkpoint_dirs(ckpt: Path) -> tuple[Path, Path]:
    """`ckpt` and the ckpt.old that a kill between replace_dir's two renames leaves, in the order
    a resume reads them."""
    return ckpt, ckpt.with_name(ckpt.name + ".old")


def save_training_state(
    ckpt: Path,
    model: GPT,
    opt: torch.optim.Optimizer,
    anchor: ScaleAnchor | None,
    step: int,
    cfg: dict,
) -> None:
    """Write the state after `step` to `ckpt` (via ckpt.tmp, so a kill never leaves half of one)."""
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    opt_state = opt.state_dict()
    for idx, state in opt_state["state"].items():
        for k, v in state.items():
            tensors[f"optim.{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    if anchor is not None:
        tensors.update({f"anchor.{k}": v for k, v in anchor.state_dict().items()})
    save_tensors(tmp / "state.safetensors", tensors)
    meta = {"step": step, "param_groups": opt_state["param_groups"], "run_config": cfg}
    write_json(tmp / "state.json", meta)
    replace_dir(tmp, ckpt)


def load_training_state(
    ckpt: Path, model: GPT, opt: torch.optim.Optimizer, anchor: ScaleAnchor | None
) -> int:
    """Load the state in `ckpt` (or ckpt.old) into model, optimizer and anchor; returns its step."""
    current, old = checkpoint_dirs(ckpt)
    if not current.is_dir() and old.is_dir():
        ckpt = old  # killed between the two renames of replace_dir
    meta = read_json(ckpt / "state.json")
    tensors = load_tensors(ckpt / "state.safetensors")
    load_model_tensors(
        model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, str(ckpt)
    )
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, idx, name = k.split(".", 2)
            state.setdefault(int(idx), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if anchor is not None:
        anchor.load_state_dict({k[7:]: v for k, v in tensors.items() if k.startswith("anchor.")})
    return int(meta["step"])


def has_checkpoint(ckpt: Path) -> bool:
    """Whether `ckpt` or the ckpt.old a kill mid-replacement leaves holds a checkpoint."""
    return any(path.is_dir() for path in checkpoint_dirs(ckpt))


def stale_checkpoint(ckpt: Path, cfg: dict) -> bool:
    """True if a checkpoint exists but was written under a different run config."""
    for path in checkpoint_dirs(ckpt):
        if (path / "state.json").is_file():
            try:
                return read_json(path / "state.json").get("run_config") != cfg
            except CheckpointError:
                return True
    return False


def resume_step(cfg: dict, out_dir: str | Path) -> int:
    """The step a rerun of run `cfg` in `out_dir` resumes from: its checkpoint's, or 0 if none."""
    ckpt = Path(out_dir) / "ckpt"
    if stale_checkpoint(ckpt, cfg):
        return 0
    for path in checkpoint_dirs(ckpt):
        if path.is_dir():
            try:
                return int(read_json(path / "state.json")["step"])
            except (CheckpointError, KeyError, ValueError):
                return 0
    return 0


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metrics logged after `step` (they belong to the part of a killed run being redone)."""
    if path.exists():
        keep = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= step]
        path.write_text("".join(ln + "\n" for ln in keep))
