"""The training state a run checkpoints and resumes from: weights, AdamW moments, the scale
anchor's statistics, the step, the run's identity (run_identity) and a copy of metrics.jsonl up
to that step, as safetensors + JSON in out/ckpt (replaced atomically, all together).

The copy of the record is what makes a resume whole when the live metrics.jsonl is gone or short
(Snakemake deletes a job's declared outputs before rerunning it; ckpt/ is not one of them)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from .anchor import ScaleAnchor
from .checkpoint import (
    CheckpointError,
    atomic_write_bytes,
    load_model_tensors,
    load_tensors,
    model_tensors,
    read_json,
    replace_dir,
    save_tensors,
    write_json,
)
from .model import GPT
from .run_identity import differences, run_identity

log = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
# Every file a run writes in its directory, eval.json first (it is written last: its presence
# says the run finished). A restart removes them all, so no directory mixes two runs.
RUN_FILES = ("eval.json", "model.safetensors", METRICS, "config.json")


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
    identity: dict,
    metrics: Path | None = None,
) -> None:
    """Write the state after `step` to `ckpt` (via ckpt.tmp, so a kill never leaves half of one),
    with the run's identity and a copy of the `metrics` file (flushed up to `step`)."""
    tmp = ckpt.with_name(ckpt.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # what a kill mid-save left
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    opt_state = opt.state_dict()
    for idx, state in opt_state["state"].items():
        for k, v in state.items():
            tensors[f"optim.{idx}.{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    if anchor is not None:
        tensors.update({f"anchor.{k}": v for k, v in anchor.state_dict().items()})
    save_tensors(tmp / "state.safetensors", tensors)
    if metrics is not None and metrics.is_file():
        shutil.copyfile(metrics, tmp / METRICS)
    meta = {
        "step": step,
        "param_groups": opt_state["param_groups"],
        "run_config": identity["config"],
        "data": identity["data"],
        "init": identity["init"],
    }
    write_json(tmp / "state.json", meta)
    replace_dir(tmp, ckpt)


def readable_checkpoint(ckpt: Path) -> Path | None:
    """The directory a resume reads: `ckpt`, or the ckpt.old a kill between replace_dir's two
    renames leaves; None if neither exists."""
    current, old = checkpoint_dirs(ckpt)
    if current.is_dir():
        return current
    return old if old.is_dir() else None


def load_training_state(
    ckpt: Path, model: GPT, opt: torch.optim.Optimizer, anchor: ScaleAnchor | None
) -> int:
    """Load the state in `ckpt` (or ckpt.old) into model, optimizer and anchor; returns its step."""
    ckpt = readable_checkpoint(ckpt) or ckpt
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
    try:
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        if anchor is not None:
            anchor.load_state_dict(
                {k[7:]: v for k, v in tensors.items() if k.startswith("anchor.")}
            )
        return int(meta["step"])
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint {ckpt} does not match the run ({type(e).__name__}: {e}); delete it to "
            "start the run over"
        ) from e


def has_checkpoint(ckpt: Path) -> bool:
    """Whether `ckpt` or the ckpt.old a kill mid-replacement leaves holds a checkpoint."""
    return any(path.is_dir() for path in checkpoint_dirs(ckpt))


def checkpoint_mismatch(ckpt: Path, identity: dict) -> list[str] | None:
    """None if there is no checkpoint; else what differs between the identity it recorded and
    `identity` (empty: it may be resumed)."""
    path = readable_checkpoint(ckpt)
    if path is None:
        return None
    try:
        recorded = read_json(path / "state.json")
    except CheckpointError:
        return ["checkpoint (its state.json is unreadable)"]
    return differences({**recorded, "config": recorded.get("run_config")}, identity)


def clear_run(out: Path, ckpt: Path) -> list[str]:
    """Remove every file a run writes in `out` (RUN_FILES, the checkpoints, the temporaries of
    interrupted atomic writes); returns the names removed."""
    removed = []
    for name in RUN_FILES:
        for path in [out / name, *out.glob(f".{name}.*.tmp")]:
            if path.is_file():
                path.unlink()
                removed.append(path.name)
    for path in [*checkpoint_dirs(ckpt), ckpt.with_name(ckpt.name + ".tmp")]:
        if path.exists():
            shutil.rmtree(path)
            removed.append(path.name + "/")
    return removed


def resume_step(cfg: dict, out_dir: str | Path) -> int:
    """The step a rerun of run `cfg` in `out_dir` resumes from: its checkpoint's, or 0 if none."""
    ckpt = Path(out_dir) / "ckpt"
    if checkpoint_mismatch(ckpt, run_identity(cfg)):
        return 0
    path = readable_checkpoint(ckpt)
    if path is None:
        return 0
    try:
        return int(read_json(path / "state.json")["step"])
    except (CheckpointError, KeyError, ValueError, TypeError):
        return 0


def _record_lines(path: Path) -> list[tuple[int, str]]:
    """(step, line) of each record of a metrics file. A torn last line (a crash or a full disk
    mid-write) is dropped, said once; a broken line elsewhere is an error naming the file and line."""
    lines = path.read_text().split("\n")
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
    """The records of a metrics file (see _record_lines for a torn or broken line)."""
    return [json.loads(line) for _, line in _record_lines(path)]


def restore_metrics(path: Path, ckpt: Path, step: int) -> int | None:
    """Make `path` the record up to `step`: the copy saved with the checkpoint `ckpt` when there
    is one, else the live file cut after `step`. Returns how many records were restored when the
    live file was missing or short, else None."""
    saved = ckpt / METRICS
    if not saved.is_file():
        keep = _record_lines(path) if path.exists() else []
        _write_lines(path, [line for s, line in keep if s <= step])
        return None
    lines = [line for s, line in _record_lines(saved) if s <= step]
    try:
        live = sum(s <= step for s, _ in _record_lines(path)) if path.exists() else 0
    except ValueError:
        live = 0  # a broken line: the saved copy replaces it
    _write_lines(path, lines)
    return len(lines) if live < len(lines) else None


def _write_lines(path: Path, lines: list[str]) -> None:
    atomic_write_bytes(path, "".join(line + "\n" for line in lines).encode())
