"""A run directory: out/{config.json, metrics.jsonl, ckpt/, model.safetensors, eval.json,
train.lock}, as one object. RunDir claims it, holds its lock, says whether it holds this run
finished (or another one), and saves, loads, prunes and clears its checkpoint; the work is done by
state.py (the checkpoint's format, what a run directory may hold) and lock.py (one writer)."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..anchor import ScaleAnchor
from ..config.run import RunConfig
from ..model import GPT
from .checkpoint import CheckpointError, save_model, write_json
from .lock import run_lock
from .metrics_log import METRICS
from .state import (
    check_run_dir,
    checkpoint_dirs,
    checkpoint_mismatch,
    claim_run_dir,
    clear_run,
    finished_differences,
    finished_result,
    has_checkpoint,
    load_training_state,
    prune_checkpoint,
    read_state,
    readable_checkpoint,
    recorded_inputs,
    save_training_state,
)

log = logging.getLogger("tapernorm.training.loop")  # the training loop's one logger


@dataclass(frozen=True)
class RunDir:
    """The directory `out` one training run writes."""

    out: Path

    @property
    def ckpt(self) -> Path:
        return self.out / "ckpt"

    @property
    def metrics_path(self) -> Path:
        return self.out / METRICS

    # ---- claiming and locking ---------------------------------------------------------------------

    def claim(self, cfg: RunConfig, force: bool = False) -> None:
        """Refuse a directory of anything but a run of this project (state.claim_run_dir)."""
        claim_run_dir(cfg, self.out, force)

    def check(self) -> None:
        """Refuse a name the run writes holding something of another kind (state.check_run_dir)."""
        check_run_dir(self.out)

    def lock(self, name: str, wait: bool = False) -> AbstractContextManager:
        """Hold train.lock: one writer at a time (lock.run_lock)."""
        return run_lock(self.out, name, wait)

    # ---- what it holds ----------------------------------------------------------------------------

    def finished(self, identity: dict) -> dict | None:
        """eval.json's dict if it holds this run, finished and whole (state.finished_result)."""
        return finished_result(self.out, self.ckpt, identity)

    def finished_differences(self, identity: dict) -> list[str]:
        """What differs between `identity` and a finished run here (state.finished_differences)."""
        return finished_differences(self.out, self.ckpt, identity)

    def mismatch(self, identity: dict) -> list[str] | None:
        """None without a checkpoint, else what differs from `identity` (empty: resumable)."""
        return checkpoint_mismatch(self.ckpt, identity)

    def has_checkpoint(self) -> bool:
        return has_checkpoint(self.ckpt)

    def readable_checkpoint(self) -> Path | None:
        """ckpt, or the ckpt.old a kill mid-replacement left; None if neither exists."""
        return readable_checkpoint(self.ckpt)

    def state(self) -> dict:
        """The checkpoint's state.json."""
        return read_state(self.ckpt)

    def recorded_inputs(self) -> dict:
        """The input file states the checkpoint recorded; {} if none."""
        return recorded_inputs(self.ckpt)

    # ---- writing ----------------------------------------------------------------------------------

    def clear(self) -> list[str]:
        """Remove every file a run writes here; returns the names removed (state.clear_run)."""
        return clear_run(self.out, self.ckpt)

    def unfinish(self) -> None:
        """Remove eval.json and the weights: rewritten at the end, until then it is not finished."""
        for name in ("eval.json", "model.safetensors"):
            (self.out / name).unlink(missing_ok=True)

    def remove_empty_checkpoints(self) -> None:
        """Remove the empty checkpoint directories a rerun's deleted outputs leave (Snakemake -f)."""
        for left in checkpoint_dirs(self.ckpt):
            if left.is_dir() and not any(left.iterdir()):
                left.rmdir()

    def save(self, **state: Any) -> None:
        """The training state to ckpt (state.save_training_state's keywords)."""
        save_training_state(self.ckpt, **state)

    def load(self, model: GPT, opt: torch.optim.Optimizer, anchor: ScaleAnchor | None) -> int:
        """The checkpoint loaded into model, optimizer and anchor; returns its step."""
        return load_training_state(self.ckpt, model, opt, anchor)

    def prune(self, name: str) -> None:
        """The finished run's checkpoint without the optimizer's moments (prune_checkpoint); a
        failure to prune keeps it whole and only says so: the run is finished either way."""
        try:
            if prune_checkpoint(self.ckpt):
                log.debug("[%s] finished: pruned %s to what a rerun reads", name, self.ckpt)
        except (CheckpointError, OSError) as e:
            log.warning(
                "[%s] finished; its checkpoint %s is kept whole (not pruned: %s)",
                name,
                self.ckpt,
                e,
            )

    def write_config(self, record: dict) -> None:
        write_json(self.out / "config.json", record)

    def write_weights(self, model: GPT, record: dict) -> None:
        """model.safetensors, and config.json with the model's config (checkpoint.save_model)."""
        save_model(model, self.out, record)

    def write_eval(self, result: dict) -> None:
        write_json(self.out / "eval.json", result)
